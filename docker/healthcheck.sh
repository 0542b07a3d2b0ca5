#!/bin/bash
# healthcheck.sh: exits 0 when GET /healthz on the probe listener answers 200; the image's
# HEALTHCHECK, with nothing but bash (the slim image has no curl).
set -eu
port="${KSIDECAR_HTTP_HEALTH_LISTEN##*:}"
exec 3<>"/dev/tcp/127.0.0.1/${port:-8081}"
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
read -r -t 4 _ status _ <&3
[ "$status" = 200 ]
