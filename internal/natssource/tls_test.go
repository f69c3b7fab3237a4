package natssource

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir, and returns their paths.
func pki(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshhost test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	sDER, sKey := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cDER, cKey := issue(3, "agent", x509.ExtKeyUsageClientAuth, nil)
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", sDER), writeKey("server-key.pem", sKey),
		write("client.pem", "CERTIFICATE", cDER), writeKey("client-key.pem", cKey)
}

// A server that requires TLS and a client certificate: a watcher with the
// CA, certificate and key reads the roster; one without a certificate
// never does, and reports the source unreachable past its patience.
func TestWatchTLSClientCertificate(t *testing.T) {
	ca, sc, sk, cc, ck := pki(t, t.TempDir())
	srv := &ownServer{t: t, bin: needNATS(t, "MESHHOST_NATS_SERVER"), dir: t.TempDir(), port: freePort(t),
		extra:   []string{"--tlsverify", "--tlscert", sc, "--tlskey", sk, "--tlscacert", ca},
		connect: []nats.Option{nats.RootCAs(ca), nats.ClientCert(cc, ck)}}
	srv.start()
	t.Cleanup(srv.kill)
	url := "tls://127.0.0.1:" + strings.TrimPrefix(srv.URL(), "nats://127.0.0.1:")
	good := Server{URL: url, CA: ca, Cert: cc, Key: ck}

	nc, err := good.Connect()
	if err != nil {
		t.Fatalf("connecting with the client certificate: %v", err)
	}
	defer nc.Close()
	p, err := NewPublisher(nc, LayoutFor("tls"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.EnsureBuckets(ctx); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	rec.expect(1, roster(5))
	publishRoster(t, p, 1, roster(5))

	startWatcher(t, Config{Server: good, Layout: LayoutFor("tls"), OnChange: rec.onChange})
	waitFor(t, 20*time.Second, "the watcher with a client certificate reads generation 1", func() bool { return rec.last() == 1 })
	rec.check()

	const patience = time.Second
	bad := startWatcher(t, Config{Server: Server{URL: url, CA: ca}, Layout: LayoutFor("tls"), Patience: patience})
	waitFor(t, 20*time.Second, "the watcher without a certificate reports the source unreachable", func() bool { return bad.Health() != nil })
	if g := bad.Generation(); g != 0 {
		t.Errorf("a watcher without a client certificate read generation %d", g)
	}
}
