package kubenode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// StableImages names the file of the node images' folder that lists every image but the
// project's own (hack/build-node-images.sh writes it): the images PreparedRoot imports.
const StableImages = "stable-images.txt"

// PreparedRoot is a root disk for a node VM (vmharness.Options.RootBase) on which the images of
// StableImages are already imported, made once per VM image, image list and node-setup.sh and
// kept in the VM image's folder. Importing them is the slowest part of a node's setup under TCG
// (248 s of the demo node's 320 on a fresh machine: every layer checksummed, unpacked and written
// twice); on a prepared root, Setup imports only the project's image, which changes with every
// commit. Making it costs one boot and that import, under a lock every process on the host shares.
func PreparedRoot(ctx context.Context, image, imagesDir string, logf func(format string, args ...any)) (string, error) {
	list, err := os.ReadFile(filepath.Join(imagesDir, StableImages))
	if err != nil {
		return "", fmt.Errorf("kubenode: prepared root: %w (rebuild the node images with hack/build-node-images.sh)", err)
	}
	sum := sha256.Sum256([]byte(nodeSetup + "\n" + string(list)))
	root := filepath.Join(image, "node-root-"+hex.EncodeToString(sum[:6])+".qcow2")
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	unlock, err := vmharness.Lock(ctx, root+".lock")
	if err != nil {
		return "", fmt.Errorf("kubenode: prepared root: waiting for another process making it: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(root); err == nil {
		return root, nil // made meanwhile
	}
	if err := makeRoot(ctx, image, imagesDir, root, logf); err != nil {
		return "", fmt.Errorf("kubenode: prepared root: %w", err)
	}
	// Roots of earlier image lists are of no further use.
	old, _ := filepath.Glob(filepath.Join(image, "node-root-*.qcow2"))
	for _, f := range old {
		if f != root {
			os.Remove(f)
			os.Remove(f + ".lock")
		}
	}
	return root, nil
}

// makeRoot boots the image with the images' folder shared, imports StableImages, powers the
// guest off cleanly and keeps its root overlay as root.
func makeRoot(ctx context.Context, image, imagesDir, root string, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	work, err := os.MkdirTemp(image, ".node-root-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	logf("kubenode: preparing a node root with the images of %s (once per VM image and image list)", StableImages)
	vm, err := vmharness.Boot(ctx, vmharness.Options{
		Image: image, WorkDir: work, Shares: []vmharness.Share{{Tag: ImagesShare, Path: imagesDir}}, Logf: logf,
	})
	if err != nil {
		return err
	}
	defer vm.Close()
	if err := vm.WriteFile(ctx, nodeSetupPath, []byte(nodeSetup), 0o755); err != nil {
		return err
	}
	out, err := vm.Output(ctx, "IMAGES_TAG="+ImagesShare+" "+nodeSetupPath+" images "+StableImages)
	if err != nil {
		return fmt.Errorf("importing the images: %w\n%s", err, out)
	}
	logf("kubenode: %s", strings.TrimSpace(out))
	if err := vm.Shutdown(ctx); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(work, "root.qcow2"), root); err != nil {
		return err
	}
	logf("kubenode: node root prepared in %s: %s", time.Since(start).Round(100*time.Millisecond), root)
	return nil
}
