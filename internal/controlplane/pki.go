package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's certificates and keys, as files in a
// directory: a CA, the serving certificates of the API server and the
// controller manager, client certificates for the admin and the
// controller manager, and the service account signing key.
type pki struct {
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

// certValidity is how long the certificates are valid: a control plane
// lives for one test run.
const certValidity = 24 * time.Hour

// newPKI creates the CA and the service account key in dir.
func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "closingtime-controlplane-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, key: key}
	if err := p.write("ca.crt", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	// The service account key signs tokens (kube-apiserver) and the
	// token controller's secrets (kube-controller-manager); its public
	// half verifies them.
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := p.writeKey("sa.key", sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, p.write("sa.pub", "PUBLIC KEY", pub)
}

// path returns the path of file name of the PKI.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes name.crt and name.key: a certificate the CA signs for
// commonName in organizations, for serving on loopback (server) or for a
// client.
func (p *pki) issue(name, commonName string, organizations []string, server bool) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: commonName, Organization: organizations},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		// The API server is also reached as the kubernetes Service, whose
		// address is the first of the service range.
		kubernetes := netip.MustParsePrefix(ServiceCIDR).Addr().Next()
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IP(kubernetes.AsSlice())}
		tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return err
	}
	if err := p.write(name+".crt", "CERTIFICATE", der); err != nil {
		return err
	}
	return p.writeKey(name+".key", key)
}

// writeKey writes key as a PEM "EC PRIVATE KEY".
func (p *pki) writeKey(name string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return p.write(name, "EC PRIVATE KEY", der)
}

// write writes der as a PEM block of type typ.
func (p *pki) write(name, typ string, der []byte) error {
	if err := os.WriteFile(p.path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	return nil
}
