// Package doccheck tests the documentation: every relative link in
// README.md and docs/ resolves inside the repository, the README's
// quickstart runs as written, and the JSON Schemas in docs/schema agree
// with the strict reader (spec/specjson). It holds tests only.
package doccheck
