package vmharness

// CongestionOff is the shell command that stops bcache sending I/O around the cache set whose
// sysfs folder is set: /sys/fs/bcache/<uuid>, or a bcache device's bcache/cache link; a shell
// word, so "$set" works. bcache goes around a cache device it finds congested (slower than 2 ms
// a read or 20 ms a write), and an emulated NVMe on a busy 2-core host is that slow at times: a
// test about where data goes turns the bypass off, or finds some of its writes on the backing
// disk.
func CongestionOff(set string) string {
	return "echo 0 > " + set + "/congested_read_threshold_us && echo 0 > " + set + "/congested_write_threshold_us"
}
