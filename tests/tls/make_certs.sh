#!/usr/bin/env bash
# Writes a throw-away PKI for the TLS tests into DIR (OpenSSL from Debian):
#   ca.crt          the CA the tests trust (ca.key signs the two below)
#   server.crt/key  "localhost": DNS:localhost and IP:127.0.0.1, for redis-server
#   client.crt/key  a client certificate (extendedKeyUsage clientAuth)
#   client.pem      client.crt and client.key in one file
#   other-ca.crt    another CA: "the wrong CA" for server.crt
#   other-server.crt/key  "localhost" as server.crt, signed by other-ca: a
#                   server the tests' CA does not vouch for
# RSA 2048, valid 2 days: nothing here is a secret or lasts.
#   bash tests/tls/make_certs.sh DIR
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
ssl() { openssl "$@" 2>/dev/null; }

ca() { # name subject
  ssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout "$1.key" -out "$1.crt" \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}

leaf() { # name subject extensions [ca]
  local ca=${4:-ca}
  ssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf '%s\n' "$3" >"$1.ext"
  ssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}

ca ca "redlockc test CA"
ca other-ca "redlockc other CA"
leaf server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf client "redlockc test client" "extendedKeyUsage=clientAuth"
leaf other-server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth" other-ca
cat client.crt client.key >client.pem
chmod 600 ./*.key client.pem
