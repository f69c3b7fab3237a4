// Package reconcile keeps a machine's containers matching its declaration:
// Plan compares the rendered declaration with what the runtime reports and
// says what to do and why; Apply does it in dependency order, within a
// replacement budget, stopping each container with its own signal and
// timeout, and replacing crash-safely, so that no mistake upstream can become
// a replacement storm.
package reconcile
