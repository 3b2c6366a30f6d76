#!/bin/bash
# Step "egress" (root): tell the guest's software where sand's egress proxy is, on a
# Lima VM with a deny policy (docs/egress.md#lima), or a Proxmox VM whose policy lists
# domains (docs/egress.md#proxmox). A convenience only: the guest's network reaches
# nothing but the proxy (and its policy's cidrs) whether or not its software is told.
# argv: PROXY_URL NO_PROXY (a VM with a deny policy), "stdin" NO_PROXY (the URL on
# stdin: it holds the VM's proxy credential, kept out of every argv), or "-" (none:
# remove what an earlier run wrote, or every proxied request would go to an address
# now gone).
. "$(dirname -- "$0")/lib.sh"
url=$1 direct=${2:-}
if [ "$url" = stdin ]; then IFS= read -r url || [ -n "$url" ] || die "no proxy URL on stdin"; fi
[[ $url = - || $url =~ ^http://([A-Za-z0-9.-]+:[A-Za-z0-9_-]+@)?[0-9.]+:[0-9]+$ ]] ||
	die "not a proxy URL"
[[ $direct =~ ^[0-9.,]*$ ]] || die "not a list of addresses: $direct"

keys='^(http_proxy|https_proxy|HTTP_PROXY|HTTPS_PROXY|no_proxy|NO_PROXY)='
# /etc/environment: read by pam_env for every session (ssh, login or not, cron).
text=$(grep -Ev "$keys" /etc/environment 2>/dev/null || true)
[ -z "$text" ] || text+=$'\n'
if [ "$url" != - ]; then
	for key in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; do text+="$key=$url"$'\n'; done
	text+="no_proxy=$direct"$'\n'"NO_PROXY=$direct"$'\n'
fi
if [ "$url" != - ] || [ -e /etc/environment ]; then
	if put_file /etc/environment 644 < <(printf '%s' "$text"); then changed /etc/environment; fi
fi

# apt runs under sudo, which resets the environment: it is told in its own config.
apt=/etc/apt/apt.conf.d/80sand-egress-proxy
if [ "$url" = - ]; then
	if [ -e "$apt" ]; then rm -f -- "$apt" && changed "$apt"; fi
else
	if put_file "$apt" 644 <<<"Acquire::http::Proxy \"$url\"; Acquire::https::Proxy \"$url\";"; then
		changed "$apt"
	fi
fi
