#!/usr/bin/env bash
# Builds the Debian bookworm guest that the kernel-level tests boot under QEMU (the host kernel
# has no bcache), and prints the folder holding it:
#   rootfs.qcow2        base root disk; every VM boots a qcow2 overlay on it, so it never changes
#   vmlinuz, initrd.img direct kernel boot: no bootloader to install or wait for
#   cmdline             kernel arguments that match how this script laid out the root disk
#   id_ed25519          the harness's SSH key (its .pub is root's authorized key in the guest)
#   ssh_host_ed25519_key.pub  the guest's host key, so the harness can pin it
#   packages.txt, kernel-version
# The folder is ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/vm/<hash of this script>: editing
# the script (the package list, a setting) builds a new image, and a warm run costs nothing.
# Needs root (mmdebstrap's root mode, and mke2fs -d must see real owners) and
# hack/install-vm-deps.sh. Only the folder goes to stdout; progress goes to stderr.
# Single-quoted $(...), ${...} and $1 below are apt's, dpkg's and mmdebstrap's own placeholders.
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=hack/lib/debian-mirrors.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-mirrors.sh"
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

exec 3>&1 1>&2

script=$(readlink -f "${BASH_SOURCE[0]}")
cache=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/vm
key=$(sha256sum "$script" | cut -c1-16)
out=$cache/$key
if [[ -f $out/rootfs.qcow2 ]]; then
	echo "$out" >&3
	exit 0
fi

if ((EUID != 0)); then
	echo "build-vm-image: must run as root (mmdebstrap root mode, mke2fs -d with real owners)" >&2
	exit 1
fi
hold_lock vm-image
if [[ -f $out/rootfs.qcow2 ]]; then # built while this waited
	echo "$out" >&3
	exit 0
fi
require mmdebstrap qemu-img ssh-keygen
require_packages debian-archive-keyring ca-certificates

suite=bookworm
packages=(
	systemd systemd-sysv udev dbus kmod iproute2 procps util-linux
	linux-image-amd64 initramfs-tools
	bcache-tools gdisk fdisk smartmontools nvme-cli sdparm hdparm
	xfsprogs e2fsprogs fio
	openssh-server
	python3 python3-apt # Ansible's modules run on the guest's Python; its apt module needs python3-apt
	open-iscsi # iscsiadm, a tool of the engine's table (iSCSI backing devices)
	targetcli-fb # an LIO iSCSI target in the guest, for the tests of iSCSI backing devices
	mariadb-server sysbench # the OLTP benchmark (make bench); mariadb.service stays masked below
	lvm2 # lvmcache and dm-writecache, the alternatives the benchmark compares
	# A Kubernetes node for make demo: the container runtime, the pods' network (bridge and
	# host-local from the CNI plugins) and kube-proxy's iptables. containerd stays masked below;
	# only the demo's node starts it.
	containerd runc containernetworking-plugins iptables
)

# Only the modules needed to mount the root disk go into the initrd: the default (MODULES=most)
# packs most of the kernel's drivers, and every byte of it is unpacked by an emulated CPU.
initrd_modules=(virtio_pci virtio_blk ext4 crc32c_generic)

# Drivers a QEMU guest can never use; dropping them makes the image smaller and its build faster.
unused_module_dirs=(
	sound drivers/gpu drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband
	drivers/staging drivers/bluetooth drivers/iio drivers/hid drivers/input/touchscreen
	drivers/isdn drivers/atm drivers/usb/gadget net/wireless net/mac80211 net/bluetooth
)

# Units that only cost boot time, or would touch the disks behind the tests' backs (smartd
# polling, fstrim, nvmf autoconnect), stay off.
masked_units=(
	apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer e2scrub_reap.service
	fstrim.timer dpkg-db-backup.timer smartd.service
	nvmefc-boot-connections.service nvmf-autoconnect.service
	systemd-networkd-wait-online.service getty@tty1.service
	systemd-timesyncd.service systemd-pstore.service
	mariadb.service lvm2-monitor.service containerd.service
	rtslib-fb-targetctl.service # restores a saved iSCSI target; tests make theirs with targetcli
)

# Modules udev would load for the emulated machine (q35's AHCI, watchdog, SMBus and PC
# speaker; KVM for the CPU model's virtualisation flags) that no test uses: each costs an
# emulated modprobe and probe at every boot.
blacklisted_modules=(
	kvm kvm_amd kvm_intel ahci libahci libata iTCO_wdt iTCO_vendor_support lpc_ich
	i2c_i801 i2c_smbus intel_pmc_bxt pcspkr psmouse serio_raw evdev
)

mapfile -t mirrors < <(debian_mirrors "$suite")

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rootfs=$tmp/rootfs
start=$SECONDS

echo "build-vm-image: mmdebstrap $suite from ${mirrors[*]}" >&2
mmdebstrap --variant=minbase --mode=root \
	--include="$(
		IFS=,
		echo "${packages[*]}"
	)" \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"' \
	--essential-hook="printf 'MODULES=list\n' >\"\$1/etc/initramfs-tools/conf.d/flashcache.conf\"" \
	--essential-hook="printf '%s\n' ${initrd_modules[*]} >\"\$1/usr/share/initramfs-tools/modules.d/flashcache\"" \
	"$suite" "$rootfs" "${mirrors[@]}"
echo "build-vm-image: rootfs in $((SECONDS - start)) s" >&2

kver=$(basename "$(ls -d "$rootfs"/lib/modules/*)")
for d in "${unused_module_dirs[@]}"; do
	rm -rf "${rootfs:?}/lib/modules/$kver/kernel/$d"
done
chroot "$rootfs" depmod "$kver"
if ! chroot "$rootfs" modprobe --dry-run --set-version "$kver" bcache >/dev/null; then
	echo "build-vm-image: the guest kernel $kver has no bcache module" >&2
	exit 1
fi

echo flashcache-vm >"$rootfs/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tflashcache-vm\n' >"$rootfs/etc/hosts"
# Matches the cmdline below: the root disk is the VM's only virtio-blk disk.
printf '/dev/vda\t/\text4\tdefaults,noatime,errors=remount-ro\t0\t1\n' >"$rootfs/etc/fstab"
# nvme_core.multipath=N: QEMU 10's NVMe reports a multi-controller subsystem, which makes the
# kernel put each namespace behind a multipath head (nvme-subsys0/nvme0n1, the path hidden as
# nvme0c0n1); the tests' SSDs stand for ordinary single-port ones, whose namespace sits on its
# controller, as under QEMU 7.2.
echo "root=/dev/vda rw console=ttyS0,115200 panic=-1 mitigations=off net.ifnames=0 nvme_core.multipath=N" >"$tmp/cmdline"

# QEMU user-mode networking always hands out 10.0.2.15: a static address avoids DHCP's wait, and a
# unit of three `ip` commands avoids systemd-networkd, whose start alone took 3.6-6 s of every boot
# under TCG, on the way to sshd.
cat >"$rootfs/etc/systemd/system/flashcache-net.service" <<'EOF'
[Unit]
Description=QEMU user networking's fixed address on eth0
DefaultDependencies=no
BindsTo=sys-subsystem-net-devices-eth0.device
After=sys-subsystem-net-devices-eth0.device
Before=network.target
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set dev eth0 up
ExecStart=/sbin/ip addr replace 10.0.2.15/24 dev eth0
ExecStart=/sbin/ip route replace default via 10.0.2.2

[Install]
WantedBy=multi-user.target
EOF
echo "nameserver 10.0.2.3" >"$rootfs/etc/resolv.conf"
chroot "$rootfs" systemctl enable flashcache-net.service >/dev/null 2>&1
# smartd's enabled alias (smartmontools.service) would make masking it fail.
chroot "$rootfs" systemctl disable smartd.service 2>/dev/null
chroot "$rootfs" systemctl mask "${masked_units[@]}" 2>/dev/null
printf 'blacklist %s\n' "${blacklisted_modules[@]}" >"$rootfs/etc/modprobe.d/flashcache-vm.conf"
# LVM only when a benchmark asks for it: no activation of volume groups udev finds on the test
# disks, no dmeventd.
cat >"$rootfs/etc/lvm/lvmlocal.conf" <<'EOF'
global {
	event_activation = 0
}
activation {
	monitoring = 0
}
EOF

# An empty root password lets a human log in on the serial console when SSH is what broke;
# SSH itself only takes the harness key.
chroot "$rootfs" passwd -d root >/dev/null
cat >"$rootfs/etc/ssh/sshd_config.d/flashcache.conf" <<'EOF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
# sshd's unit checks its configuration (sshd -t) before every start: one more emulated sshd on
# the way to the first connection of each boot, for a file this script wrote.
mkdir -p "$rootfs/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\n' >"$rootfs/etc/systemd/system/ssh.service.d/no-config-test.conf"
# The harness dials only once the console says sshd listens: a connection made before that can
# hang unanswered for seconds and is dropped and made again (test/vmharness, waitSSH).
cat >"$rootfs/etc/systemd/system/flashcache-ssh-ready.service" <<'EOF'
[Unit]
Description=Tell the test harness on the serial console that sshd listens
After=ssh.service
Requires=ssh.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "flashcache-vm: sshd is listening" >/dev/ttyS0'

[Install]
WantedBy=multi-user.target
EOF
chroot "$rootfs" systemctl enable flashcache-ssh-ready.service 2>/dev/null
# openssh-server's postinst made host keys already; -A only fills any gap.
ssh-keygen -A -f "$rootfs" >/dev/null
cp "$rootfs/etc/ssh/ssh_host_ed25519_key.pub" "$tmp/"
ssh-keygen -q -t ed25519 -N '' -C flashcache-vm-harness -f "$tmp/id_ed25519"
install -d -m 0700 "$rootfs/root/.ssh"
install -m 0600 "$tmp/id_ed25519.pub" "$rootfs/root/.ssh/authorized_keys"

cp "$rootfs/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$rootfs/boot/initrd.img-$kver" "$tmp/initrd.img"
echo "$kver" >"$tmp/kernel-version"
chroot "$rootfs" dpkg-query -W -f='${Package} ${Version}\n' >"$tmp/packages.txt"
rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log

# A sparse raw ext4 straight from the directory (no loop device, which containers often lack),
# then qcow2 so the cache holds only the used blocks and overlays can sit on top.
used_mib=$(du -sm "$rootfs" | cut -f1)
size_mib=$((used_mib + 3072)) # room for what tests install or write on the root disk
mke2fs -q -t ext4 -L flashcache-root -d "$rootfs" "$tmp/rootfs.raw" "${size_mib}M"
qemu-img convert -f raw -O qcow2 "$tmp/rootfs.raw" "$tmp/rootfs.qcow2.part"
rm -rf "$rootfs" "$tmp/rootfs.raw"
mv "$tmp/rootfs.qcow2.part" "$tmp/rootfs.qcow2"
echo "build-vm-image: ${used_mib} MiB rootfs, kernel $kver, $((SECONDS - start)) s in all" >&2

chmod 0755 "$tmp"
# Another build may have finished first; its result is as good as ours.
if mv -T "$tmp" "$out" 2>/dev/null; then
	trap - EXIT
elif [[ ! -f $out/rootfs.qcow2 ]]; then
	echo "build-vm-image: $out exists but holds no image; remove it and run again" >&2
	exit 1
fi
echo "$out" >&3
