package agent

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

func TestAPoolIsReadAgainOnlyForVolumeChangesThatCountInIt(t *testing.T) {
	base := func() *fcv1.FlashCacheVolume {
		fcv := &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: "v", Generation: 1, Finalizers: []string{"f"}}}
		fcv.Status.ObservedGeneration = 1
		fcv.Status.Conditions = []metav1.Condition{{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue}}
		size := resource.MustParse("300Mi")
		fcv.Status.Device = &fcv1.DeviceStatus{Name: "bcache0", BackingUUID: "b", CacheSetUUID: "s", Capacity: &size, State: "clean", CacheMode: "writeback"}
		fcv.Status.DirtyData = resource.NewQuantity(0, resource.BinarySI)
		return fcv
	}
	now := metav1.NewTime(time.Now())
	for name, tc := range map[string]struct {
		change func(*fcv1.FlashCacheVolume)
		want   bool
	}{
		"dirty data refreshed": {func(v *fcv1.FlashCacheVolume) {
			v.Status.DirtyData = resource.NewQuantity(4<<20, resource.BinarySI)
			v.Status.Device.State = "dirty"
		}, false},
		"hit ratio refreshed":    {func(v *fcv1.FlashCacheVolume) { h := int32(80); v.Status.HitRatioPercent = &h }, false},
		"mode changed by policy": {func(v *fcv1.FlashCacheVolume) { v.Status.Device.CacheMode = "writethrough" }, false},
		"spec changed":           {func(v *fcv1.FlashCacheVolume) { v.Generation = 2 }, true},
		"new spec applied":       {func(v *fcv1.FlashCacheVolume) { v.Status.ObservedGeneration = 2 }, true},
		"deleted":                {func(v *fcv1.FlashCacheVolume) { v.DeletionTimestamp = &now }, true},
		"finalizer removed":      {func(v *fcv1.FlashCacheVolume) { v.Finalizers = nil }, true},
		"provisioned no more": {func(v *fcv1.FlashCacheVolume) {
			v.Status.Conditions = []metav1.Condition{{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionFalse}}
		}, true},
		"device grown": {func(v *fcv1.FlashCacheVolume) {
			size := resource.MustParse("320Mi")
			v.Status.Device.Capacity = &size
		}, true},
		"device gone": {func(v *fcv1.FlashCacheVolume) { v.Status.Device = nil }, true},
	} {
		t.Run(name, func(t *testing.T) {
			old, changed := base(), base()
			tc.change(changed)
			if got := volumeChangedItsPool(old, changed); got != tc.want {
				t.Errorf("volumeChangedItsPool = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVolumesAreLookedAtAgainOnlyForPoolChangesThatMatterToThem(t *testing.T) {
	base := func() *fcv1.FlashCachePool {
		p := &fcv1.FlashCachePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
		p.Status.Phase = fcv1.PoolPhaseReady
		p.Status.CacheSetUUID = "s"
		p.Status.Allocatable = resource.NewQuantity(10<<30, resource.BinarySI)
		p.Status.Volumes = 2
		p.Status.Conditions = []metav1.Condition{{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue}}
		return p
	}
	now := metav1.NewTime(time.Now())
	for name, tc := range map[string]struct {
		change func(*fcv1.FlashCachePool)
		want   bool
	}{
		"a volume built takes space": {func(p *fcv1.FlashCachePool) {
			p.Status.Allocatable = resource.NewQuantity(9<<30, resource.BinarySI)
			p.Status.Volumes = 3
		}, false},
		"a volume removed gives space back": {func(p *fcv1.FlashCachePool) {
			p.Status.Allocatable = resource.NewQuantity(11<<30, resource.BinarySI)
			p.Status.Volumes = 1
		}, true},
		"spec changed":          {func(p *fcv1.FlashCachePool) { p.Generation = 2 }, true},
		"failed":                {func(p *fcv1.FlashCachePool) { p.Status.Phase = fcv1.PoolPhaseFailed }, true},
		"new cache set":         {func(p *fcv1.FlashCachePool) { p.Status.CacheSetUUID = "t" }, true},
		"deleted":               {func(p *fcv1.FlashCachePool) { p.DeletionTimestamp = &now }, true},
		"no longer provisioned": {func(p *fcv1.FlashCachePool) { p.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
	} {
		t.Run(name, func(t *testing.T) {
			old, changed := base(), base()
			tc.change(changed)
			if got := poolChangedItsVolumes(old, changed); got != tc.want {
				t.Errorf("poolChangedItsVolumes = %v, want %v", got, tc.want)
			}
		})
	}
}
