package units

import "testing"

func TestBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", 25060966: "23.9 MiB", 3 << 30: "3.0 GiB"} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
}
