// Package units prints sizes for people: kubectl drain output, events and conditions.
package units

import "fmt"

// Bytes prints b in binary units with one decimal ("3.0 GiB", "512 B").
func Bytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
