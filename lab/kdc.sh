# shellcheck shell=bash
# The lab's Kerberos realm (sourced by lab.sh; needs its helpers and a
# loaded lab.env). An MIT KDC (Debian's krb5-kdc, krb5-admin-server for
# kadmin.local) in a network namespace of its own, kwl<id>k0 at
# 198.18.<id>.254 on the lab bridge, for the realm KWL<id>.TEST:
#   - kwinctl@REALM, the operator, with its keytab DIR/kdc/kwinctl.keytab
#     (`kinit -k -t` it into a credential cache: no password anywhere);
#   - HTTP/<address>@REALM for each simulated Windows host winJ, its keys in
#     DIR/hosts/winJ/http.keytab, the keytab winsim accepts with
#     (KRB5_KTNAME, see start_winsim);
#   - DIR/kdc/krb5.conf: the realm and its KDC, for the operator's side
#     (KRB5_CONFIG) and for winsim.
# `lab.sh kdc DIR --clock OFFSET` restarts the KDC with its clock OFFSET off
# (libfaketime's `faketime -f`, e.g. +2h): the domain's clock and the
# operator's then disagree, as when either drifted after `kinit`.
# `lab.sh kdc DIR --stop` stops it: a KDC that cannot be reached.
# Facts: docs/research/kerberos.md.

kdc_ns() { echo "kwl${LAB_ID}k0"; }
kdc_ip() { echo "198.18.$LAB_ID.254"; }
kdc_realm() { echo "KWL${LAB_ID}.TEST"; }
kdc_env() { # DIR: the environment of the KDC's tools
  echo "KRB5_CONFIG=$1/kdc/krb5.conf" "KRB5_KDC_PROFILE=$1/kdc/kdc.conf"
}

kdc_files() { # DIR: realm, database, principals, keytabs
  local dir=$1 kd="$1/kdc" realm j
  realm=$(kdc_realm)
  mkdir -p "$kd"
  cat > "$kd/krb5.conf" <<EOF
[libdefaults]
  default_realm = $realm
  dns_lookup_kdc = false
  dns_lookup_realm = false
  rdns = false
  dns_canonicalize_hostname = false
  udp_preference_limit = 1
[realms]
  $realm = {
    kdc = $(kdc_ip):88
  }
EOF
  cat > "$kd/kdc.conf" <<EOF
[kdcdefaults]
  kdc_listen = $(kdc_ip):88
  kdc_tcp_listen = $(kdc_ip):88
[realms]
  $realm = {
    database_name = $kd/principal
    key_stash_file = $kd/stash
    acl_file = $kd/kadm5.acl
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    max_life = 10h 0m 0s
  }
[logging]
  kdc = FILE:$kd/kdc.log
EOF
  : > "$kd/kadm5.acl"
  # shellcheck disable=SC2046
  env $(kdc_env "$dir") kdb5_util -r "$realm" create -s -P "$(head -c 18 /dev/urandom | base64)" \
    >/dev/null 2>&1 || die "kdb5_util create failed for $realm"
  kdc_admin "$dir" "addprinc -randkey kwinctl@$realm"
  kdc_admin "$dir" "ktadd -k $kd/kwinctl.keytab -norandkey kwinctl@$realm"
  for j in $(seq 1 "${M:-0}"); do
    kdc_admin "$dir" "addprinc -randkey HTTP/$(win_ip "$j")@$realm"
    kdc_admin "$dir" "ktadd -k $dir/hosts/win$j/http.keytab -norandkey HTTP/$(win_ip "$j")@$realm"
  done
}

kdc_admin() { # DIR QUERY: kadmin.local on the lab's database
  local out
  # shellcheck disable=SC2046
  out=$(env $(kdc_env "$1") kadmin.local -r "$(kdc_realm)" -q "$2" 2>&1) \
    || die "kadmin.local '$2' failed: $out"
  case "$out" in *rror*) die "kadmin.local '$2': $out" ;; esac
}

kdc_stop() { # DIR
  local pidf="$1/kdc/krb5kdc.pid"
  if [ -f "$pidf" ]; then kill "$(cat "$pidf")" 2>/dev/null || true; fi
  if [ -e "/run/netns/$(kdc_ns)" ]; then kill_nss "$(kdc_ns)"; fi
  rm -f "$pidf"
}

kdc_start() { # DIR [OFFSET]
  local dir=$1 kd="$1/kdc"
  local -a fake=()
  if [ -n "${2:-}" ]; then
    command -v faketime >/dev/null || die "faketime is not installed (apt-get install faketime)"
    fake=(faketime -f "$2")
  fi
  # shellcheck disable=SC2046
  ip netns exec "$(kdc_ns)" env $(kdc_env "$dir") setsid "${fake[@]}" krb5kdc -n -P "$kd/krb5kdc.pid" \
    </dev/null >>"$kd/krb5kdc.out" 2>&1 &
  wait_tcp "$(kdc_ip)" 88 20 || die "the KDC did not come up: $(tail -3 "$kd/krb5kdc.out" "$kd/kdc.log" 2>/dev/null)"
}

cmd_kdc() { # DIR [--clock OFFSET | --stop]
  local dir=$1 offset=""
  load "$dir"
  if [ "${2:-}" = --stop ]; then
    [ -f "$dir/kdc/kdc.conf" ] || die "no KDC in $dir"
    kdc_stop "$dir"
    echo "lab.sh: the KDC of $(kdc_realm) is stopped (its address stays: nothing answers on port 88)"
    return 0
  fi
  [ "${3:-}" = "" ] || { [ "$2" = --clock ] && offset=$3; } || die "usage: lab.sh kdc DIR [--clock OFFSET | --stop]"
  [ -n "$offset" ] || [ "${2:-}" = "" ] || die "usage: lab.sh kdc DIR [--clock OFFSET | --stop]"
  command -v krb5kdc >/dev/null || [ -x /usr/sbin/krb5kdc ] || die "krb5kdc is not installed (scripts/setup.sh)"
  export PATH="$PATH:/usr/sbin"
  if [ ! -f "$dir/kdc/kdc.conf" ]; then
    trap 'if [ "$?" -ne 0 ]; then kdc_stop "$dir"; ip netns del "$(kdc_ns)" 2>/dev/null || true; rm -rf "$dir/kdc"; fi' EXIT
    add_host_ns "$(kdc_ns)" "kwl${LAB_ID}k" "$(kdc_ip)"
    kdc_files "$dir"
  else
    kdc_stop "$dir"
  fi
  kdc_start "$dir" "$offset"
  trap - EXIT
  echo "lab.sh: KDC of realm $(kdc_realm) on $(kdc_ip)${offset:+ (clock $offset)}; krb5.conf $dir/kdc/krb5.conf"
}
