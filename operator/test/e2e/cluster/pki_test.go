package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

func TestPKIServesEveryNameTheAPIServerIsReachedBy(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPKI(dir, "192.168.227.1")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CAPEM) {
		t.Fatal("CA does not parse")
	}
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, pkiServingCert), filepath.Join(dir, pkiServingKey))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(serving.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"192.168.227.1", KubernetesServiceIP, "127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "192.168.227.9", Roots: roots}); err == nil {
		t.Error("serving certificate verifies for an address it was not issued for")
	}

	client, err := tls.LoadX509KeyPair(filepath.Join(dir, pkiKubeletClientCert), filepath.Join(dir, pkiKubeletClientKey))
	if err != nil {
		t.Fatal(err)
	}
	clientLeaf, _ := x509.ParseCertificate(client.Certificate[0])
	if _, err := clientLeaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client certificate: %v", err)
	}
	if got := clientLeaf.Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("kubelet client certificate groups = %v", got)
	}
	for _, f := range []string{pkiServiceAccountKey, pkiServiceAccountPub} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := NewPKI(t.TempDir(), "not-an-ip"); err == nil {
		t.Error("NewPKI took a name where an address belongs")
	}
}
