package resolver

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"net/netip"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// canarySecret keys CanaryAddress. It is drawn once per process and never
// changes, so no cache, other resolver or earlier run can produce an answer
// that passes.
var canarySecret = func() [32]byte {
	var k [32]byte
	rand.Read(k[:])
	return k
}()

// CanaryName is the name a reachability probe asks for:
// "<nonce>.meshhost-probe.<zone>". The nonce must be one DNS label (letters,
// digits, hyphens); a fresh one per probe defeats caches.
func CanaryName(nonce, zone string) string {
	return strings.ToLower(nonce) + "." + probeLabel + "." + spec.CanonicalName(zone)
}

// CanaryAddress is the IPv4 address this process's resolvers answer for
// CanaryName(nonce, zone) in any roster zone (TTL 0). It is an HMAC of the
// nonce under a per-process secret, in 240.0.0.0/4 (reserved, never a host),
// so a probe that gets it back has reached this very resolver.
func CanaryAddress(nonce string) netip.Addr {
	mac := hmac.New(sha256.New, canarySecret[:])
	mac.Write([]byte(strings.ToLower(nonce)))
	sum := mac.Sum(nil)
	a := [4]byte{0xF0 | sum[0]&0x0F, sum[1], sum[2], sum[3]}
	if a == [4]byte{255, 255, 255, 255} {
		a[3] = 254 // never the broadcast address
	}
	return netip.AddrFrom4(a)
}
