package volumefile

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
)

const twoVolumes = `apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: mysql-a}
spec:
  nodeName: db1
  cacheDevice: {path: /dev/disk/by-id/nvme-a}
  backingDevice: {path: /dev/disk/by-id/ata-a}
---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: mysql-b}
spec:
  nodeName: db1
  cacheDevice: {path: /dev/disk/by-id/nvme-b, overProvisionPercent: 30}
  backingDevice: {path: /dev/disk/by-id/ata-b}
  mode: writethrough
  sequentialCutoff: 0
  dirtyThresholdPercent: 25
`

func TestReadAppliesTheCRDDefaults(t *testing.T) {
	vols, err := readVolumes(strings.NewReader(twoVolumes))
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 2 || vols[0].Name != "mysql-a" || vols[1].Name != "mysql-b" {
		t.Fatalf("volumes = %+v", vols)
	}
	a := vols[0].Spec
	if *a.CacheDevice.OverProvisionPercent != 20 || a.Mode != "writeback" || *a.DirtyThresholdPercent != fcv1.DefaultDirtyThresholdPercent ||
		a.FlushPeriod.Duration.String() != "5m0s" || a.SequentialCutoff.String() != "4Mi" || a.Volume.FSType != "xfs" ||
		a.CacheSequentialUntilFull == nil || !*a.CacheSequentialUntilFull || a.CacheDevice.BucketSize.String() != "512Ki" {
		t.Errorf("defaults not applied: %+v", a)
	}
	if b := vols[1].Spec; *b.CacheDevice.OverProvisionPercent != 30 || b.Mode != "writethrough" || !b.SequentialCutoff.IsZero() || *b.DirtyThresholdPercent != 25 {
		t.Errorf("explicit values lost: %+v", vols[1].Spec)
	}
}

func TestReadRefusesWhatTheAPIServerRefuses(t *testing.T) {
	bad := `apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: careless}
spec:
  nodeName: db1
  cacheDevice: {path: /dev/nvme0n1, overProvisionPercent: 70, bucketSize: 100Ki}
  backingDevice: {path: /dev/disk/by-id/ata-a, iscsi: {portal: 192.0.2.1, iqn: "iqn.2003-01.org.x:y", lun: 0}}
  flushPeriod: 5s
  mode: writeabout
`
	_, err := Read(context.Background(), strings.NewReader(bad))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`"careless"`,
		"spec.cacheDevice.path", "stable device path",
		"spec.cacheDevice.overProvisionPercent",
		"spec.cacheDevice.bucketSize", "power of two",
		"spec.backingDevice", "exactly one",
		"spec.flushPeriod", "between 10s and 24h",
		"spec.mode",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestReadRefusesOtherKindsAndDuplicates(t *testing.T) {
	if _, err := Read(context.Background(), strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")); err == nil || !strings.Contains(err.Error(), "FlashCacheVolume") {
		t.Errorf("other kind: %v", err)
	}
	dup := twoVolumes + "---\n" + strings.SplitN(twoVolumes, "---\n", 2)[0]
	if _, err := Read(context.Background(), strings.NewReader(dup)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := Read(context.Background(), strings.NewReader("")); err == nil {
		t.Error("empty file accepted")
	}
}

func TestTheSamplesAreValidVolumeFiles(t *testing.T) {
	files, _ := filepath.Glob("../../config/samples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no samples found")
	}
	for _, f := range files {
		if _, err := Load(context.Background(), f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// A header of comments before the first --- is a document with nothing in it, as Ansible's
// template writes; a file of comments only still has no volume, which is refused.
func TestReadSkipsDocumentsOfCommentsOnly(t *testing.T) {
	vols, err := readVolumes(strings.NewReader("# managed by Ansible\n---\n" + twoVolumes + "---\n# the end\n"))
	if err != nil || len(vols) != 2 {
		t.Fatalf("volumes %+v, err %v: want the two volumes", vols, err)
	}
	if _, err := Read(context.Background(), strings.NewReader("# managed by Ansible\n# no volumes on this host\n")); err == nil {
		t.Error("a file of comments only accepted")
	}
}

const iscsiVolume = `apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: mysql-san}
spec:
  nodeName: db1
  cacheDevice: {path: /dev/disk/by-id/nvme-a}
  backingDevice:
    iscsi:
      portal: 192.0.2.10
      iqn: iqn.2003-01.org.linux-iscsi.san1:mysql
      lun: 0
      chapSecretRef: {namespace: flashcache-system, name: san1-chap}
`

func TestReadTakesCHAPFromASecretInTheFile(t *testing.T) {
	secret := "---\napiVersion: v1\nkind: Secret\nmetadata: {namespace: flashcache-system, name: san1-chap}\n" +
		"data:\n  node.session.auth.username: bXlzcWw=\nstringData:\n  node.session.auth.password: s3cr3t-pass\n"
	vols, err := readVolumes(strings.NewReader(iscsiVolume + secret))
	if err != nil {
		t.Fatal(err)
	}
	if c := vols[0].CHAP; len(vols) != 1 || c == nil || c.Username != "mysql" || c.Password != "s3cr3t-pass" {
		t.Errorf("volumes %+v, CHAP %#v", vols, vols[0].CHAP)
	}

	for name, tc := range map[string]struct{ file, want string }{
		"no secret":           {iscsiVolume, "chapSecretRef: no Secret flashcache-system/san1-chap in the file"},
		"secret elsewhere":    {iscsiVolume + strings.Replace(secret, "flashcache-system", "default", 1), "no Secret flashcache-system/san1-chap"},
		"secret without user": {iscsiVolume + strings.Replace(secret, "  node.session.auth.username: bXlzcWw=\n", "", 1), "has no node.session.auth.username"},
	} {
		_, err := Read(context.Background(), strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t-pass") {
			t.Errorf("%s: the password is in the error: %v", name, err)
		}
	}
}

// The acceptance of a lost cache's dirty data travels with the volume, as on the API object.
func TestReadKeepsTheAcceptedCacheLoss(t *testing.T) {
	doc := strings.Replace(twoVolumes, "metadata: {name: mysql-a}", "metadata: {name: mysql-a, annotations: {flashcache.io/accept-cache-loss: /dev/disk/by-id/nvme-old}}", 1)
	vols, err := readVolumes(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if vols[0].AcceptedCacheLoss != "/dev/disk/by-id/nvme-old" || vols[1].AcceptedCacheLoss != "" {
		t.Errorf("accepted cache loss: %q, %q", vols[0].AcceptedCacheLoss, vols[1].AcceptedCacheLoss)
	}
}

// readVolumes is Read for a file of volumes only.
func readVolumes(r io.Reader) ([]engine.Volume, error) {
	f, err := Read(context.Background(), r)
	if err != nil {
		return nil, err
	}
	return f.Volumes, nil
}

const poolAndCarvedVolume = `apiVersion: flashcache.io/v1alpha1
kind: FlashCachePool
metadata: {name: db1}
spec:
  nodeName: db1
  cacheDevice: {path: /dev/disk/by-id/nvme-a}
  backingDevices:
  - path: /dev/disk/by-id/ata-a
  - path: /dev/disk/by-id/ata-b
---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: mysql-0}
spec:
  nodeName: db1
  pool: {name: db1, size: 10Gi}
`

func TestPoolsAreReadDefaultedAndCheckedWithTheirCRD(t *testing.T) {
	f, err := Read(context.Background(), strings.NewReader(poolAndCarvedVolume))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Pools) != 1 || len(f.Volumes) != 1 {
		t.Fatalf("pools %+v, volumes %+v", f.Pools, f.Volumes)
	}
	p := f.Pools[0]
	if p.Name != "db1" || len(p.Spec.BackingDevices) != 2 || p.Spec.ReplacementPolicy != "lru" || *p.Spec.CacheDevice.OverProvisionPercent != 20 {
		t.Errorf("pool not read or not defaulted: %+v", p)
	}
	if v := f.Volumes[0]; v.Spec.Pool == nil || v.Spec.Pool.Size.Value() != 10<<30 || v.Pool == nil || v.Pool.Name != "db1" {
		t.Errorf("carved volume, or its pool not given to it: %+v", v)
	}
	cases := []struct{ name, file, want string }{
		{"a pool's rule", strings.Replace(poolAndCarvedVolume, "ata-b", "nvme-a", 1), `FlashCachePool "db1" is invalid`},
		{"a volume's pool not in the file", strings.Replace(poolAndCarvedVolume, "pool: {name: db1", "pool: {name: db2", 1), `spec.pool.name: no FlashCachePool "db2"`},
		{"a volume on another node than its pool", strings.Replace(poolAndCarvedVolume, "metadata: {name: mysql-0}\nspec:\n  nodeName: db1", "metadata: {name: mysql-0}\nspec:\n  nodeName: db2", 1), `spec.nodeName: "db2", but pool "db1" is on "db1"`},
		{"a pool twice", poolAndCarvedVolume + "---\n" + strings.SplitN(poolAndCarvedVolume, "---\n", 2)[0], `pool "db1" appears twice`},
	}
	for _, c := range cases {
		if _, err := Read(context.Background(), strings.NewReader(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if f, err := Read(context.Background(), strings.NewReader(strings.SplitN(poolAndCarvedVolume, "---\n", 2)[0])); err != nil || len(f.Pools) != 1 {
		t.Errorf("a file of one pool and no volume: %v", err)
	}
}

// BenchmarkReadAFileOfTwoVolumes is one round of `flashcache node run`'s reading of its file,
// which happens every --interval: 140 ms when each read built the validators, 2.4 ms since.
func BenchmarkReadAFileOfTwoVolumes(b *testing.B) {
	for b.Loop() {
		if _, err := readVolumes(strings.NewReader(twoVolumes)); err != nil {
			b.Fatal(err)
		}
	}
}
