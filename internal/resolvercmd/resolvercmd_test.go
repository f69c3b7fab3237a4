package resolvercmd

import (
	"io"
	"testing"
	"time"

	"github.com/meshhost/meshhost/resolver"
)

// TestCacheFlags: the cache is on by default; a flag's 0 turns it (or
// negative answers) off, which the Config says with a negative value.
func TestCacheFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want resolver.Config
	}{
		{nil, resolver.Config{CacheSize: resolver.DefaultCacheSize, CacheMaxTTL: resolver.DefaultCacheMaxTTL, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-size", "0"}, resolver.Config{CacheSize: -1, CacheMaxTTL: resolver.DefaultCacheMaxTTL, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-max-ttl", "0", "--cache-size", "50"}, resolver.Config{CacheSize: 50, CacheMaxTTL: -1, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-max-negative-ttl", "0", "--cache-max-ttl", "30s"}, resolver.Config{CacheSize: resolver.DefaultCacheSize, CacheMaxTTL: 30 * time.Second, CacheMaxNegativeTTL: -1}},
	} {
		args := append([]string{"--listen", "127.0.0.1:5353", "--roster", "r.json"}, tc.args...)
		f, err := parseFlags("test", io.Discard, args)
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", tc.args, err)
		}
		var got resolver.Config
		f.cache.Apply(&got)
		if got.CacheSize != tc.want.CacheSize || got.CacheMaxTTL != tc.want.CacheMaxTTL || got.CacheMaxNegativeTTL != tc.want.CacheMaxNegativeTTL {
			t.Errorf("flags %q: cache %d, %v, %v; want %d, %v, %v", tc.args, got.CacheSize, got.CacheMaxTTL, got.CacheMaxNegativeTTL,
				tc.want.CacheSize, tc.want.CacheMaxTTL, tc.want.CacheMaxNegativeTTL)
		}
	}
}
