package blockdev

import (
	"fmt"
	"strings"
	"testing"
)

// Lines as Linux 6.1's bcache prints them in /sys/kernel/debug/bcache/bcache-<set>.
const btreeDump = `0:4096 len 8 -> [0:106496 gen 1]
0:4288 len 32 -> [0:4429376 gen 1] dirty
1:6336 len 32 -> [0:4498400 gen 1] dirty
0:6368 len 1024 -> [0:4578304 gen 2] dirty
0:9000 len 16 -> [0:200 gen 1, check dev] dirty cs1 12ab
`

func TestParseDirtyExtentsKeepsOnlyTheInodesDirtyKeysSorted(t *testing.T) {
	got, err := ParseDirtyExtents(strings.NewReader(btreeDump), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []CacheExtent{{0, 1, 200, 16}, {0, 1, 4429376, 32}, {0, 2, 4578304, 1024}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("extent %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A line it cannot read must stop it: a key skipped could be dirty data the pass never waits for.
func TestParseDirtyExtentsRefusesALineItCannotRead(t *testing.T) {
	for _, bad := range []string{"0:4096 len 8 [0:1 gen 1] dirty", "0:x len 8 -> [0:1 gen 1]", "0:1 len 8 -> [0:1 gen] dirty", "0:1 len 8 -> [0:1 gen 1"} {
		if _, err := ParseDirtyExtents(strings.NewReader(btreeDump+bad+"\n"), 0); err == nil {
			t.Errorf("%q was read without an error", bad)
		}
	}
}

func TestStillDirtyCountsOnlyTheSameDataDirtyAgain(t *testing.T) {
	before := []CacheExtent{{0, 1, 100, 64}, {0, 1, 1000, 8}, {0, 2, 100, 64}}
	for _, c := range []struct {
		name string
		now  []CacheExtent
		want uint64
	}{
		{"all written back", nil, 0},
		{"new data elsewhere", []CacheExtent{{0, 1, 500, 64}, {0, 3, 100, 64}}, 0},
		{"untouched", before, 64 + 8 + 64},
		// An overwrite in the middle splits a key: the two ends keep their data where it was.
		{"split by an overwrite", []CacheExtent{{0, 1, 100, 16}, {0, 1, 132, 32}, {0, 1, 900, 16}}, 48},
		{"the bucket reused: a new generation", []CacheExtent{{0, 2, 1000, 8}}, 0},
		{"one sector left", []CacheExtent{{0, 2, 163, 1}}, 1},
	} {
		if got := StillDirty(before, c.now); got != c.want {
			t.Errorf("%s: %d sectors still dirty, want %d", c.name, got, c.want)
		}
	}
}

// A pass reads the whole btree dump at its start and again at each look: on a large cache that is
// hundreds of thousands of keys, most of them other volumes' or clean.
func BenchmarkParseDirtyExtents(b *testing.B) {
	var dump strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&dump, "%d:%d len 32 -> [0:%d gen %d] dirty\n", i%3, 4096+i*32, 106496+i*64, 1+i%7)
	}
	text := dump.String()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := ParseDirtyExtents(strings.NewReader(text), 1); err != nil {
			b.Fatal(err)
		}
	}
}
