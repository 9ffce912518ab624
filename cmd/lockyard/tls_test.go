package main

import (
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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// writeCerts writes a CA and a server certificate for 127.0.0.1 signed by
// it into dir, and returns the paths of ca.pem, server.pem and server.key.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockyard test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for path, block := range map[string]*pem.Block{
		ca: {Type: "CERTIFICATE", Bytes: caDER}, cert: {Type: "CERTIFICATE", Bytes: srvDER}, key: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// lockyard run and status over TLS (rediss://) as a least-privilege ACL
// user; a wrong password is refused with the Redis-unavailable status.
func TestTLSAndACLUser(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := redistest.Start("--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The ACL of docs/SECURITY.md for registry key "lockyard", plus +scan
	// for status.
	if _, err := s.Do("ACL", "SETUSER", "ops", "on", ">s3cret", "resetkeys", "resetchannels",
		"~lockyard:*", "~{lockyard:*", "&lockyard-channel:*", "-@all", "+evalsha", "+eval", "+subscribe", "+unsubscribe", "+psubscribe",
		"+ping", "+info", "+get", "+set", "+del", "+incr", "+pexpire", "+pttl", "+publish", "+time", "+scan",
		"+zadd", "+zrank", "+zrem", "+zrange", "+zcard", "+zscore", "+zcount", "+hget", "+hset", "+hdel"); err != nil {
		t.Fatal(err)
	}
	url := "rediss://ops:s3cret@127.0.0.1:" + strconv.Itoa(port)
	tlsCmd := func(args ...string) []string {
		return append([]string{"REDIS_URL=" + url, "SSL_CERT_FILE=" + ca}, args...)
	}
	// A new fence counter starts at the server's clock in microseconds
	// (TIME, in the ACL).
	cmd := lockyard("run", "--fencing", "job", "--", "sh", "-c", `test "$LOCKYARD_TOKEN" -gt 1000000000000000`)
	cmd.Env = append(cmd.Env, tlsCmd()...)
	if code, out := exitCode(t, cmd); code != 0 {
		t.Fatalf("run over TLS as the ACL user: exit %d: %s", code, out)
	}
	cmd = lockyard("status", "--no-such-flag")
	if code, _ := exitCode(t, cmd); code != exitUsage {
		t.Fatalf("an unknown flag: exit %d, want %d", code, exitUsage)
	}
	cmd = lockyard("status", "job")
	cmd.Env = append(cmd.Env, tlsCmd()...)
	if code, out := exitCode(t, cmd); code != exitFree || !strings.Contains(out, "free") {
		t.Fatalf("status over TLS of a free key (exit %d, want %d): %s", code, exitFree, out)
	}
	// The server's certificate is verified: without the CA, no connection.
	cmd = lockyard("run", "job", "--", "true")
	cmd.Env = append(cmd.Env, "REDIS_URL="+url, "SSL_CERT_FILE="+filepath.Join(dir, "missing.pem"))
	if code, out := exitCode(t, cmd); code != exitUnavailable || !strings.Contains(out, "certificate") {
		t.Fatalf("an unknown CA: exit %d, want %d with a certificate error: %s", code, exitUnavailable, out)
	}
	cmd = lockyard("run", "job", "--", "true")
	cmd.Env = append(cmd.Env, "REDIS_URL="+strings.Replace(url, "s3cret", "wrong", 1), "SSL_CERT_FILE="+ca)
	code, out := exitCode(t, cmd)
	if code != exitUnavailable || strings.Contains(out, "wrong") {
		t.Fatalf("a wrong password: exit %d, want %d, with the password redacted: %s", code, exitUnavailable, out)
	}
}
