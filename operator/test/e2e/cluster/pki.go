package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// KubernetesServiceIP is the first address of envtest's service range (10.0.0.0/24): the
// kubernetes Service, which pods reach the API server through.
const KubernetesServiceIP = "10.0.0.1"

// Files of a cluster's PKI folder. envtest reuses a CertDir that already holds apiserver.crt,
// so writing these before the API server starts replaces its own certificates, which name
// only localhost and 127.0.0.1.
const (
	pkiCA                = "ca.crt"
	pkiServingCert       = "apiserver.crt"
	pkiServingKey        = "apiserver.key"
	pkiServiceAccountPub = "sa-signer.crt"
	pkiServiceAccountKey = "sa-signer.key"
	// The API server's client certificate towards kubelets (logs, exec, port-forward, the
	// pod proxy), signed by the CA that kubelets trust for client certificates.
	pkiKubeletClientCert = "kubelet-client.crt"
	pkiKubeletClientKey  = "kubelet-client.key"
)

// PKI is the certificate authority of a cluster whose API server is reached from other
// machines: pods reach it as the kubernetes Service's address, kubelets at the host's address.
type PKI struct {
	Dir string
	// CAPEM is the CA certificate: the API server's serving certificate chains to it, and
	// kubelets trust it for the API server's client certificate.
	CAPEM []byte
}

// CAPath is the CA certificate's file, for a kubelet's authentication.x509.clientCAFile.
func (p *PKI) CAPath() string { return filepath.Join(p.Dir, pkiCA) }

// NewPKI writes a CA, a serving certificate for every name the API server is reached by
// (localhost, 127.0.0.1, addresses, the kubernetes Service's IP and DNS names), the API
// server's kubelet client certificate and the service-account signing key into dir.
func NewPKI(dir string, addresses ...string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "flashcache-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	p := &PKI{Dir: dir, CAPEM: pemBlock("CERTIFICATE", caDER)}
	if err := os.WriteFile(p.CAPath(), p.CAPEM, 0o644); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}

	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}
	for _, a := range addresses {
		ip := net.ParseIP(a)
		if ip == nil {
			return nil, fmt.Errorf("pki: %q is not an IP address", a)
		}
		ips = append(ips, ip)
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		DNSNames: []string{servingName, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.issue(ca, caKey, serving, pkiServingCert, pkiServingKey); err != nil {
		return nil, err
	}
	kubeletClient := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.issue(ca, caKey, kubeletClient, pkiKubeletClientCert, pkiKubeletClientKey); err != nil {
		return nil, err
	}

	// RSA: every Kubernetes version verifies RS256 service-account tokens.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}
	if err := writeKey(filepath.Join(dir, pkiServiceAccountKey), saKey); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, pkiServiceAccountPub), pemBlock("PUBLIC KEY", saPub), 0o644); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return p, nil
}

// issue signs template with the CA and writes the certificate and a new key.
func (p *PKI) issue(ca *x509.Certificate, caKey crypto.Signer, template *x509.Certificate, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: key for %s: %w", template.Subject.CommonName, err)
	}
	template.NotBefore = ca.NotBefore
	template.NotAfter = ca.NotAfter
	template.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("pki: certificate for %s: %w", template.Subject.CommonName, err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir, certFile), pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return writeKey(filepath.Join(p.Dir, keyFile), key)
}

func writeKey(path string, key crypto.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %s: %w", path, err)
	}
	if err := os.WriteFile(path, pemBlock("PRIVATE KEY", der), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
