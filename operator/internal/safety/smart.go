package safety

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Wear is what SMART says about a device's remaining life.
type Wear struct {
	// PercentUsed is the device's estimate of its life used (NVMe percentage_used, or 100 minus
	// the normalized value of an ATA wear attribute); nil when the device does not say.
	PercentUsed     *int `json:"percentUsed,omitempty"`
	AvailableSpare  *int `json:"availableSpare,omitempty"`
	SpareThreshold  *int `json:"spareThreshold,omitempty"`
	MediaErrors     int  `json:"mediaErrors"`
	CriticalWarning int  `json:"criticalWarning"`
	// Worn is true when a threshold is crossed; Reasons say which.
	Worn    bool     `json:"worn"`
	Reasons []string `json:"reasons,omitempty"`
}

// ataWearAttributes are the vendors' names for normalized "life left" attributes (100 when new).
// IDs differ by vendor, so they are matched by name.
var ataWearAttributes = []string{
	"Wear_Leveling_Count",     // Samsung 177
	"Media_Wearout_Indicator", // Intel 233
	"Percent_Lifetime_Remain", // Micron, Crucial 202
	"SSD_Life_Left",           // SandForce 231
	"Remaining_Lifetime_Perc", // 169
	"Available_Reservd_Space", // Intel 232
}

// ParseSmart reads `smartctl --json -a DEV` and judges wear against maxPercentUsed.
func ParseSmart(out []byte, maxPercentUsed int) (*Wear, error) {
	var doc struct {
		NVMe *struct {
			CriticalWarning         int  `json:"critical_warning"`
			AvailableSpare          *int `json:"available_spare"`
			AvailableSpareThreshold *int `json:"available_spare_threshold"`
			PercentageUsed          *int `json:"percentage_used"`
			MediaErrors             int  `json:"media_errors"`
		} `json:"nvme_smart_health_information_log"`
		ATA *struct {
			Table []struct {
				ID     int    `json:"id"`
				Name   string `json:"name"`
				Value  int    `json:"value"`
				Thresh int    `json:"thresh"`
			} `json:"table"`
		} `json:"ata_smart_attributes"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parsing smartctl JSON: %w", err)
	}
	w := &Wear{}
	switch {
	case doc.NVMe != nil:
		n := doc.NVMe
		w.PercentUsed, w.AvailableSpare, w.SpareThreshold = n.PercentageUsed, n.AvailableSpare, n.AvailableSpareThreshold
		w.MediaErrors, w.CriticalWarning = n.MediaErrors, n.CriticalWarning
		if n.CriticalWarning != 0 {
			w.Worn = true
			w.Reasons = append(w.Reasons, fmt.Sprintf("NVMe critical warning %#x", n.CriticalWarning))
		}
		if n.AvailableSpare != nil && n.AvailableSpareThreshold != nil && *n.AvailableSpare < *n.AvailableSpareThreshold {
			w.Worn = true
			w.Reasons = append(w.Reasons, fmt.Sprintf("available spare %d%% is below the device's threshold %d%%", *n.AvailableSpare, *n.AvailableSpareThreshold))
		}
	case doc.ATA != nil:
		for _, a := range doc.ATA.Table {
			if !isWearAttribute(a.Name) {
				continue
			}
			used := 100 - a.Value
			if used < 0 {
				used = 0
			}
			if w.PercentUsed == nil || used > *w.PercentUsed {
				w.PercentUsed = &used
			}
			if a.Thresh > 0 && a.Value <= a.Thresh {
				w.Worn = true
				w.Reasons = append(w.Reasons, fmt.Sprintf("%s (id %d) is at %d, at or below its threshold %d", a.Name, a.ID, a.Value, a.Thresh))
			}
		}
	default:
		return w, fmt.Errorf("smartctl reported neither an NVMe health log nor ATA attributes")
	}
	if w.PercentUsed != nil && *w.PercentUsed >= maxPercentUsed {
		w.Worn = true
		w.Reasons = append(w.Reasons, fmt.Sprintf("%d%% of the rated life is used (limit %d%%)", *w.PercentUsed, maxPercentUsed))
	}
	if w.MediaErrors > 0 {
		w.Reasons = append(w.Reasons, fmt.Sprintf("%d media errors", w.MediaErrors))
	}
	return w, nil
}

func isWearAttribute(name string) bool {
	for _, n := range ataWearAttributes {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}
