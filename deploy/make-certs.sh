#!/usr/bin/env bash
# Certificates for mutual TLS between ragd's services, made with openssl:
#
#   deploy/make-certs.sh DIR [HOST...]
#
# writes DIR/ca.pem (the CA every service trusts; its key stays in DIR/ca.key: keep it offline)
# and a key and certificate per service, DIR/{store,embedder,gateway}.{key,pem}, valid for
# 825 days, each naming the service, localhost, 127.0.0.1 and every extra HOST (for example
# the names your orchestrator gives the services) among its subject alternative names.
# Then give each service RAGD_TLS_CERT=DIR/<service>.pem, RAGD_TLS_KEY=DIR/<service>.key and
# RAGD_TLS_CA=DIR/ca.pem (see README, Security).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 DIR [HOST...]" >&2
  exit 2
fi
dir=$1
shift
mkdir -p "$dir"
chmod 700 "$dir"
umask 077
days=825
key_options=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [[ ! -f "$dir/ca.pem" ]]; then
  openssl req -x509 "${key_options[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" \
    -days "$days" -subj "/CN=ragd internal CA" 2>/dev/null
fi

for service in store embedder gateway; do
  names="DNS:$service,DNS:localhost,IP:127.0.0.1"
  for host in "$@"; do
    if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then
      names+=",IP:$host"
    else
      names+=",DNS:$host"
    fi
  done
  openssl req "${key_options[@]}" -keyout "$dir/$service.key" -out "$dir/$service.csr" \
    -subj "/CN=$service" 2>/dev/null
  # The gateway is a client of the others, and the others are servers: one certificate can
  # be both, which keeps the recipe short.
  openssl x509 -req -in "$dir/$service.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days "$days" -out "$dir/$service.pem" \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$names") \
    2>/dev/null
  rm -f "$dir/$service.csr"
done
rm -f "$dir/ca.srl"
echo "wrote $dir/ca.pem and the store, embedder and gateway keys and certificates"
