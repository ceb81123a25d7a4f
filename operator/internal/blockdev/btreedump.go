package blockdev

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DebugfsBcache is where the kernel offers a dump of each cache set's btree (debugfs, mounted by
// systemd on every Debian host; 0400, root only).
var DebugfsBcache = "/sys/kernel/debug/bcache"

// ErrNoBtreeDump says the kernel offers no dump of the cache set's btree here (debugfs not
// mounted, or not visible in a container).
var ErrNoBtreeDump = errors.New("no bcache btree dump in debugfs")

// CacheExtent is where a dirty extent's data lies on the cache device: its pointer, in 512-byte
// sectors. bcache never writes new data over a live extent: a write goes to fresh space, and a
// bucket is reused only with its generation raised, so an extent with the same device, generation
// and sectors is the same data, still not written back. Only its copying garbage collector moves
// dirty data (off unless turned on; DirtyExtents refuses to read while it is on).
type CacheExtent struct {
	Dev     uint64 `json:"dev"`
	Gen     uint64 `json:"gen"`
	Offset  uint64 `json:"offset"`
	Sectors uint64 `json:"sectors"`
}

// DirtyExtents reads the cache set's btree dump and returns where the dirty data of the backing
// device with bcache id inode lies on the cache, sorted. It reads every key of the set (a fraction
// of a second for tens of thousands of keys).
func DirtyExtents(setUUID string, inode uint64) ([]CacheExtent, error) {
	// Checked at every reading: with the copying garbage collector on, an extent gone from where
	// it was may have been moved, still dirty, rather than written back.
	if gc, err := ReadSysfs(filepath.Join(SysFsBcache, setUUID, "internal", "copy_gc_enabled")); err != nil || gc != "0" {
		return nil, fmt.Errorf("cache set %s: copy_gc_enabled %q (%v): its copying garbage collector may move dirty extents", setUUID, gc, err)
	}
	f, err := os.Open(filepath.Join(DebugfsBcache, "bcache-"+setUUID))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoBtreeDump
	}
	if err != nil {
		return nil, fmt.Errorf("opening the btree dump of cache set %s: %w", setUUID, err)
	}
	defer func() { _ = f.Close() }()
	ext, err := ParseDirtyExtents(f, inode)
	if err != nil {
		return nil, fmt.Errorf("the btree dump of cache set %s: %w", setUUID, err)
	}
	return ext, nil
}

// ParseDirtyExtents reads a btree dump, one key a line as bcache prints an extent
// ("0:4288 len 32 -> [0:4429376 gen 1] dirty": inode:start, sectors, then each pointer as
// dev:offset and its generation), and returns the cache pointers of inode's dirty keys, sorted.
// A line it cannot read is an error, never skipped: a key missed would be dirty data unseen.
func ParseDirtyExtents(r io.Reader, inode uint64) ([]CacheExtent, error) {
	var out []CacheExtent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		ext, keyInode, dirty, err := parseExtentKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		if dirty && keyInode == inode {
			out = append(out, ext...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, compareExtents)
	return out, nil
}

func compareExtents(a, b CacheExtent) int {
	return cmp.Or(cmp.Compare(a.Dev, b.Dev), cmp.Compare(a.Gen, b.Gen), cmp.Compare(a.Offset, b.Offset))
}

func parseExtentKey(line string) (ext []CacheExtent, inode uint64, dirty bool, err error) {
	head, ptrs, ok := strings.Cut(line, " -> [")
	if !ok {
		return nil, 0, false, errors.New("no pointer list")
	}
	// By hand, not fmt.Sscanf: a dump has a line for every key of the cache, and with Sscanf
	// this was 7% of the agent's CPU through the end-to-end tests; 1.8 µs a line against 0.4
	// (BenchmarkParseDirtyExtents).
	inode, _, sectors, err := colonPairThen(head, "len")
	if err != nil {
		return nil, 0, false, fmt.Errorf("key: %w", err)
	}
	list, flags, ok := strings.Cut(ptrs, "]")
	if !ok {
		return nil, 0, false, errors.New("pointer list not closed")
	}
	dirty = slices.Contains(strings.Fields(flags), "dirty")
	for _, p := range strings.Split(list, ", ") {
		if p == "check dev" || p == "" {
			continue
		}
		dev, offset, gen, err := colonPairThen(p, "gen")
		if err != nil {
			return nil, 0, false, fmt.Errorf("pointer %q: %w", p, err)
		}
		e := CacheExtent{Dev: dev, Offset: offset, Gen: gen, Sectors: sectors}
		ext = append(ext, e)
	}
	return ext, inode, dirty, nil
}

// colonPairThen reads "<a>:<b> <word> <c>", decimal numbers, as bcache prints a key ("0:4288 len
// 32") and a pointer ("0:4429376 gen 1"); what follows is not its business.
func colonPairThen(s, word string) (a, b, c uint64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 || f[1] != word {
		return 0, 0, 0, fmt.Errorf("want <n>:<n> %s <n>", word)
	}
	first, second, ok := strings.Cut(f[0], ":")
	if !ok {
		return 0, 0, 0, fmt.Errorf("want <n>:<n> %s <n>", word)
	}
	if a, err = strconv.ParseUint(first, 10, 64); err != nil {
		return 0, 0, 0, err
	}
	if b, err = strconv.ParseUint(second, 10, 64); err != nil {
		return 0, 0, 0, err
	}
	if c, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return 0, 0, 0, err
	}
	return a, b, c, nil
}

// StillDirty returns how many sectors of the extents in before are dirty again in now: the same
// data, never written back. Both must be sorted, as DirtyExtents returns them.
func StillDirty(before, now []CacheExtent) uint64 {
	var left uint64
	i := 0
	for _, n := range now {
		for i < len(before) && endsBefore(before[i], n) {
			i++
		}
		for j := i; j < len(before) && sameSpace(before[j], n) && before[j].Offset < n.Offset+n.Sectors; j++ {
			lo, hi := max(before[j].Offset, n.Offset), min(before[j].Offset+before[j].Sectors, n.Offset+n.Sectors)
			if hi > lo {
				left += hi - lo
			}
		}
	}
	return left
}

func sameSpace(a, b CacheExtent) bool { return a.Dev == b.Dev && a.Gen == b.Gen }

// endsBefore says whether a lies wholly before b in the sort order: no later extent of now can
// overlap it either.
func endsBefore(a, b CacheExtent) bool {
	if !sameSpace(a, b) {
		return compareExtents(a, b) < 0
	}
	return a.Offset+a.Sectors <= b.Offset
}

// BackingInode returns the id bcache gives the backing device whose bcache device is bcacheDev
// (bcache0) within its cache set: the N of the set's bdevN link to it, the inode of its keys.
func BackingInode(setUUID, bcacheDev string) (uint64, error) {
	want, err := filepath.EvalSymlinks(filepath.Join(SysClassBlock, bcacheDev, "bcache"))
	if err != nil {
		return 0, fmt.Errorf("finding the backing device of %s: %w", bcacheDev, err)
	}
	links, err := filepath.Glob(filepath.Join(SysFsBcache, setUUID, "bdev*"))
	if err != nil {
		return 0, err
	}
	for _, l := range links {
		if got, err := filepath.EvalSymlinks(l); err == nil && got == want {
			return strconv.ParseUint(strings.TrimPrefix(filepath.Base(l), "bdev"), 10, 64)
		}
	}
	return 0, fmt.Errorf("cache set %s has no bdevN link to %s's backing device", setUUID, bcacheDev)
}
