#!/bin/sh
# Makes the test VM a Kubernetes node: its address on the host's tap network, containerd with
# the pod sandbox and CNI set up, the images imported, then kubelet and kube-proxy as transient
# systemd units. Run once per boot by kubenode.Setup, which has already written
# /etc/kubernetes/{kubelet,kube-proxy}.kubeconfig and /etc/kubernetes/pki/ca.crt.
# Environment: NODE_NAME NODE_IP NODE_MAC POD_CIDR PAUSE_IMAGE BIN_TAG IMAGES_TAG
#
# `node-setup images LIST` only imports the images LIST names (a file of the images share, in
# images.txt's form) and leaves containerd stopped and masked, as the image has it: the root
# disk kubenode.PreparedRoot keeps, so that a node imports only what changed since. Environment:
# IMAGES_TAG.
set -eu

say() { echo "node-setup: $*"; }
# Whatever fails, say where: the harness shows stderr.
trap '[ $? = 0 ] || echo "node-setup: failed at line $LINENO" >&2' EXIT

# mount_share TAG DIR: the host folder shared as TAG, read-only at DIR.
mount_share() {
	mkdir -p "$2"
	mountpoint -q "$2" || mount -t 9p -o trans=virtio,version=9p2000.L,ro "$1" "$2"
}

start_containerd() {
	systemctl unmask containerd.service >/dev/null 2>&1
	systemctl restart containerd.service
	for i in $(seq 60); do
		ctr version >/dev/null 2>&1 && break
		sleep 0.5
	done
}

# import_images LIST: each image LIST names that containerd does not have yet.
import_images() {
	start=$(date +%s) imported=0 present=0
	while read -r image file; do
		if ctr -n k8s.io images ls -q | grep -qx "docker.io/library/$image"; then
			present=$((present + 1))
			continue
		fi
		ctr -n k8s.io images import "/opt/kubernetes/images/$file" >/dev/null
		imported=$((imported + 1))
		say "imported $image"
	done <"/opt/kubernetes/images/$1"
	say "images ready after $(($(date +%s) - start)) s ($imported imported, $present already there)"
}

if [ "${1:-}" = images ]; then
	modprobe -a overlay 9p 9pnet_virtio
	mount_share "$IMAGES_TAG" /opt/kubernetes/images
	start_containerd
	import_images "$2"
	systemctl stop containerd.service
	systemctl mask containerd.service >/dev/null 2>&1
	sync
	exit 0
fi

# The tap card, found by the MAC the harness gives it.
card=
for c in /sys/class/net/*; do
	if [ "$(cat "$c/address")" = "$NODE_MAC" ]; then
		card=$(basename "$c")
	fi
done
[ -n "$card" ] || {
	say "no network card with MAC $NODE_MAC"
	exit 1
}
ip link set dev "$card" up
ip addr replace "$NODE_IP/24" dev "$card"

# nf_conntrack: kube-proxy writes its sysctls at start and exits when they are not there yet
# (under load it did, before anything else had loaded the module, and no Service then worked).
modprobe -a overlay br_netfilter nf_conntrack 9p 9pnet_virtio
sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
# Swap is off in the image; kubelet still checks.
swapoff -a

mount_share "$BIN_TAG" /opt/kubernetes/bin
mount_share "$IMAGES_TAG" /opt/kubernetes/images

mkdir -p /etc/containerd /etc/cni/net.d /var/lib/kubelet
# The systemd cgroup driver, as kubelet's cgroupDriver below: the two must agree.
cat >/etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
# One node, one bridge: pods get addresses of POD_CIDR on cni0; the host routes POD_CIDR to this
# node, so the API server reaches webhooks and the pod proxy without any overlay.
cat >/etc/cni/net.d/10-flashcache-demo.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "flashcache-demo",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
start_containerd
import_images images.txt

cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
resolvConf: /etc/resolv.conf
# A small test disk: no image garbage collection (nothing could be pulled back) and eviction
# only when truly full.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
EOF
systemctl reset-failed kubelet.service kube-proxy.service >/dev/null 2>&1 || true
# Restarted when they exit, as a real node's units are: a kube-proxy that gave up once must not
# leave the node without Services for the rest of the run.
restart="--property=Restart=on-failure --property=RestartSec=2"
# shellcheck disable=SC2086 # $restart is two arguments
systemd-run --unit=kubelet --description=kubelet $restart /opt/kubernetes/bin/kubelet \
	--config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.kubeconfig \
	--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
# --bind-address names the node's address, which kube-proxy otherwise reads from the Node object
# and, when the kubelet registers late, takes to be loopback.
# shellcheck disable=SC2086
systemd-run --unit=kube-proxy --description=kube-proxy $restart /opt/kubernetes/bin/kube-proxy \
	--kubeconfig=/etc/kubernetes/kube-proxy.kubeconfig --hostname-override="$NODE_NAME" \
	--bind-address="$NODE_IP" --proxy-mode=iptables --cluster-cidr="$POD_CIDR"
say "kubelet and kube-proxy started"
