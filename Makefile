# The two set-up commands of the README: `make run` and `make test`. Both start from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
DEMO_TENANT ?= demo
DEMO_PASSWORD ?= demo-password
# daphne's -b/-p listen with a backlog of 50, too few for a reconnect storm (docs/performance.md,
# "Lean handshake, upgrade, frame and per-socket paths").
LISTEN_BACKLOG := 2048
DAPHNE_LIMITS := --websocket-max-message-size 1048576 --websocket-max-frame-size 1048576
# Web Push for the embedded setup: QIM_VAPID_PRIVATE_KEY when set, else a key generated once
# into var/ (qim_vapid_key keeps an existing file); the contact defaults to mailto:admin@localhost.
VAPID_KEY_FILE := var/vapid-private.pem
VAPID_ENV := QIM_VAPID_PRIVATE_KEY="$${QIM_VAPID_PRIVATE_KEY:-$$(cat $(VAPID_KEY_FILE))}" \
  QIM_VAPID_SUBJECT="$${QIM_VAPID_SUBJECT:-mailto:admin@localhost}"

.PHONY: run worker cluster test deps services bench clean web

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

deps: $(VENV)/.installed

# The web client served at / (clients/web/dist): esbuild from clients/js's lockfile.
web: deps
	@command -v node >/dev/null && command -v npm >/dev/null \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null)
	$(PY) clients/web/build.py

# Serve the embedded default (SQLite under var/, in-process channel layer) on :8000. The web
# client's origin is allowed on whatever HOST and PORT are given, unless QIM_ALLOWED_ORIGINS says.
run: deps web
	$(PY) manage.py migrate -v0
	$(PY) manage.py collectstatic --noinput -v0
	@$(PY) manage.py qim_bootstrap --tenant $(DEMO_TENANT) --admin admin --password $(DEMO_PASSWORD) \
	  | tail -n 1 | sed 's/^/demo tenant (admin password $(DEMO_PASSWORD)): /'
	@$(PY) manage.py qim_populate --tenant $(DEMO_TENANT) --users 2 --password $(DEMO_PASSWORD) \
	  --device-id demo --tokens-out var/demo-users.json >/dev/null \
	  && echo "demo users u000001 and u000002 (password $(DEMO_PASSWORD)): chat with admin from a second window"
	@[ -n "$${QIM_VAPID_PRIVATE_KEY}" ] || $(PY) manage.py qim_vapid_key --out $(VAPID_KEY_FILE) >/dev/null
	QIM_ALLOWED_ORIGINS="$${QIM_ALLOWED_ORIGINS:-http://$(HOST):$(PORT),http://localhost:$(PORT)}" \
	  $(VAPID_ENV) $(VENV)/bin/daphne -e tcp:port=$(PORT):interface=$(HOST):backlog=$(LISTEN_BACKLOG) $(DAPHNE_LIMITS) qim.asgi:application

# The push worker beside `make run` (a second terminal), with the same VAPID key.
worker: deps
	@[ -n "$${QIM_VAPID_PRIVATE_KEY}" ] || $(PY) manage.py qim_vapid_key --out $(VAPID_KEY_FILE) >/dev/null
	$(VAPID_ENV) $(PY) manage.py qim_push_worker

# The whole topology on one machine (deploy/cluster.py all): its own PostgreSQL and Redis
# under var/cluster, two nodes (8001, 8002), a push worker and nginx on :8000 in front; the
# demo tenant's admin token is written to var/cluster/demo-admin.json. Ctrl-C stops it all.
cluster: deps web services
	$(PY) deploy/cluster.py all

# Debian packages the suite starts for real: Redis and PostgreSQL; Node.js and npm for the
# TypeScript SDK's suite (clients/js, run by tests/client/test_js_sdk.py) and the web client;
# Chromium for the browser tests (tests/browser: Playwright drives /usr/bin/chromium, no
# browser download), with an emoji font so reactions render in its screenshots; nginx for the
# local cluster (make cluster, tests/deploy).
services:
	@command -v redis-server >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server postgresql >/dev/null)
	@test -x /usr/sbin/nginx \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null)
	@command -v node >/dev/null && command -v npm >/dev/null \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null)
	@test -x /usr/bin/chromium && test -d /usr/share/fonts/truetype/noto \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null)

# Two pytest-xdist workers by default (a test file per worker, so module fixtures stay shared):
# about half the time of one process on the 2-core CI machine. TEST_WORKERS=0 runs one process.
# Then the protocol's tests again on stock daphne, autobahn and Twisted (QIM_SERVER_TUNING=off,
# every node the harness starts inherits it): every frame type, AUTH, rooms, closes, walls,
# the SDKs and the fault tests, less those marked `tuned` (they test a replacement itself).
# The REST, admin, push, registry and browser tests reach the WebSocket only through these.
TEST_WORKERS ?= 2
STOCK_TESTS := tests/gateway tests/walls tests/rooms tests/control tests/faults tests/reactions tests/rtc \
  tests/client tests/fuzz/test_frame_fuzz.py
.PHONY: test-stock
test: deps services
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	@[ -n "$(PYTEST_ARGS)" ] || $(MAKE) --no-print-directory test-stock  # a subset asked for: that alone

test-stock: deps services
	QIM_SERVER_TUNING=off $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not tuned" $(STOCK_TESTS)

bench: deps services
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .pytest_cache clients/js/node_modules clients/js/dist clients/js/build clients/web/dist
