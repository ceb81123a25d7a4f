// Command vmshell boots the test VM with one NVMe and one HDD and opens an interactive root
// shell in it, for poking at bcache by hand the way the kernel-level tests see it. The VM is
// killed when the shell exits; with -workdir the disks are kept for the next session.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vmshell:", err)
		os.Exit(1)
	}
}

func run() error {
	image := flag.String("image", os.Getenv("FLASHCACHE_VM_IMAGE"), "image folder printed by hack/build-vm-image.sh (default $FLASHCACHE_VM_IMAGE)")
	workDir := flag.String("workdir", "", "keep the disks and logs here (default: a temporary folder, removed afterwards)")
	nvmeGiB := flag.Int64("nvme-gib", 4, "NVMe size in GiB")
	hddGiB := flag.Int64("hdd-gib", 8, "HDD size in GiB")
	hddCache := flag.String("hdd-cache", vmharness.CacheNone.String(), "the HDD's write cache: "+strings.Join(cacheNames(), ", "))
	flag.Parse()
	cache, ok := cacheNamed(*hddCache)
	if !ok {
		return fmt.Errorf("-hdd-cache %q: want one of %s", *hddCache, strings.Join(cacheNames(), ", "))
	}
	if *image == "" {
		return errors.New("no image: pass -image or set FLASHCACHE_VM_IMAGE (make vm-shell does)")
	}
	dir := *workDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "flashcache-vmshell-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}

	// ^C belongs to the shell in the guest; the VM goes when the shell does.
	signal.Ignore(os.Interrupt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nvme := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache0", Size: *nvmeGiB << 30}
	hdd := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-backing0", Size: *hddGiB << 30, Cache: cache}
	fmt.Fprintf(os.Stderr, "vmshell: booting in %s (about 20 s under TCG)\n", dir)
	vm, err := vmharness.Boot(ctx, vmharness.Options{
		Image: *image, WorkDir: dir, Disks: []vmharness.Disk{nvme, hdd},
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	defer vm.Close()

	sshArgs := vm.SSHCommand()
	fmt.Fprintf(os.Stderr, "vmshell: NVMe %s, HDD %s\nvmshell: from another terminal: %s\n",
		nvme.ByID(), hdd.ByID(), strings.Join(sshArgs, " "))
	shell := exec.Command(sshArgs[0], append([]string{"-t"}, sshArgs[1:]...)...)
	shell.Stdin, shell.Stdout, shell.Stderr = os.Stdin, os.Stdout, os.Stderr
	var exitErr *exec.ExitError
	if err := shell.Run(); err != nil && !errors.As(err, &exitErr) {
		return err
	}
	return nil
}

var caches = []vmharness.DiskCache{vmharness.CacheNone, vmharness.CacheVolatileHonest, vmharness.CacheVolatileLying}

func cacheNames() []string {
	names := make([]string, len(caches))
	for i, c := range caches {
		names[i] = c.String()
	}
	return names
}

func cacheNamed(name string) (vmharness.DiskCache, bool) {
	for _, c := range caches {
		if c.String() == name {
			return c, true
		}
	}
	return 0, false
}
