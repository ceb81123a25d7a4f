// Command diskwriter is the power-cut test's committing workload, after diskchecker.pl: it writes
// numbered 4 KiB records with O_DIRECT|O_DSYNC and prints "ack N" only after the kernel reported
// record N durable, so the host outside the VM knows what was promised. -verify reads them back
// and prints how many promised records are missing or damaged.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

const recordSize = 4096

func main() {
	dev := flag.String("dev", "", "block device")
	start := flag.Int64("start", 0, "first record number (records are at number*4096 bytes)")
	count := flag.Int64("count", 1<<20, "records to write, or to verify")
	round := flag.Uint64("round", 0, "round, mixed into the contents so old records do not pass")
	verify := flag.Bool("verify", false, "verify records start..start+count-1 instead of writing")
	base := flag.Int64("base", 0, "byte offset of record 0 on the device (a backing disk's data offset)")
	batch := flag.Bool("batch", false, "write all records without O_DSYNC, then one fdatasync, then acknowledge them all")
	flag.Parse()
	if err := run(*dev, *base, *start, *count, *round, *verify, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "diskwriter:", err)
		os.Exit(1)
	}
}

func record(buf []byte, n int64, round uint64) {
	rng := rand.New(rand.NewPCG(uint64(n), round))
	for i := 0; i < len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
	}
	copy(buf, "FCDW")
	binary.LittleEndian.PutUint64(buf[8:], uint64(n))
	binary.LittleEndian.PutUint64(buf[16:], round)
}

func run(dev string, base, start, count int64, round uint64, verify, batch bool) error {
	flags := os.O_WRONLY | unix.O_DIRECT | unix.O_DSYNC
	if batch {
		flags = os.O_WRONLY | unix.O_DIRECT
	}
	if verify {
		flags = os.O_RDONLY | unix.O_DIRECT
	}
	f, err := os.OpenFile(dev, flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, recordSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	want := make([]byte, recordSize)
	missing := 0
	for n := start; n < start+count; n++ {
		if verify {
			if _, err := f.ReadAt(buf, base+n*recordSize); err != nil {
				return err
			}
			record(want, n, round)
			if !bytes.Equal(buf, want) {
				missing++
			}
			continue
		}
		record(buf, n, round)
		if _, err := f.WriteAt(buf, base+n*recordSize); err != nil {
			return err
		}
		if !batch {
			fmt.Printf("ack %d\n", n)
		}
	}
	if batch {
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		fmt.Printf("ack %d\n", start+count-1)
	}
	if verify {
		fmt.Printf("missing %d of %d\n", missing, count)
	}
	return nil
}
