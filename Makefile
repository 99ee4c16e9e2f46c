# Herald: build, run and test from a fresh Debian/Ubuntu machine with Rust installed.
#
#   make run    install what is missing (libclang), build, start a node on 127.0.0.1:8080
#   make test   install what the tests need (chromium, nftables, node, ...: scripts/test-deps.sh),
#               then run every test (unit, storage suite, black-box tests against the real
#               binary, the example page and the console in chromium)
#   make compose-check   validate docker-compose.yml, the Prometheus config and alerts, the dashboard
#   make bench  the produce-path benchmarks and the machine's ceilings (QUICK=1: a smoke run)
#   make console         rebuild the web console (web-console/dist, committed and embedded)
#   make console-check   rebuild it and fail when the committed web-console/dist is not current

# Builds are cached outside the clone, so a fresh checkout reuses the compiled RocksDB.
CARGO_TARGET_DIR ?= /var/tmp/herald-target
export CARGO_TARGET_DIR

CARGO ?= cargo
# Extra arguments for `make run`, e.g. make run ARGS='--data-dir /tmp/herald'
ARGS ?=

.PHONY: all deps test-deps js-deps console-deps console console-unit console-check build run test lint compose-check bench-build bench clean

all: build

# rocksdb's bindings are generated with bindgen, which needs libclang and a C/C++ compiler.
deps:
	@if dpkg -s libclang-dev >/dev/null 2>&1 && command -v clang >/dev/null 2>&1; then \
		echo "deps: libclang-dev and clang are installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libclang-dev clang; \
	else \
		echo "deps: libclang-dev/clang are missing; run as root: apt-get install -y libclang-dev clang"; \
		exit 1; \
	fi

build: deps
	$(CARGO) build --release

run: deps
	$(CARGO) run --release -- serve $(ARGS)

# What the tests need beyond libclang (chromium, nftables, node, curl, the pinned Python client
# generator): installed when missing (as root; otherwise it prints what to run).
test-deps:
	scripts/test-deps.sh

test: deps test-deps js-deps console-unit
	$(CARGO) test --workspace --all-targets

# The npm packages of tests/js (playwright-core, which drives /usr/bin/chromium:
# apt-get install -y chromium nodejs npm; never downloads a browser; and the AsyncAPI parser),
# pinned by the lock file, installed again when the lock file changes.
js-deps:
	@if [ ! -f tests/js/node_modules/.package-lock.json ] || \
		[ tests/js/package-lock.json -nt tests/js/node_modules/.package-lock.json ]; then \
		cd tests/js && npm ci --no-audit --no-fund; \
	fi

# The web console (web-console/: TypeScript, Preact, Vite). Its build, web-console/dist, is
# committed and compiled into the binary (crates/herald-api/src/api/routes/console.rs), so `cargo build` needs no npm;
# after changing web-console/src, `make console` and commit dist/ with the change. Node 18 or
# later (apt-get install -y nodejs npm); the packages are pinned by web-console/package-lock.json.
console-deps:
	@if [ ! -f web-console/node_modules/.package-lock.json ] || \
		[ web-console/package-lock.json -nt web-console/node_modules/.package-lock.json ]; then \
		cd web-console && npm ci --no-audit --no-fund; \
	fi

console:
	cd web-console && npm ci --no-audit --no-fund && npm run build

# The console's unit tests (vitest); its end-to-end test in chromium is tests/it/ui/console.rs.
console-unit: console-deps
	cd web-console && npm test

# The build is reproducible: rebuilt from the committed sources it must equal the committed dist/.
console-check: console
	@if ! git diff --quiet -- web-console/dist || \
		[ -n "$$(git ls-files --others --exclude-standard -- web-console/dist)" ]; then \
		git status --short -- web-console/dist; \
		echo "console-check: web-console/dist is not the build of web-console/src: run make console and commit dist/"; \
		exit 1; \
	fi
	@echo "console-check: web-console/dist is current"

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Validates docker-compose.yml (parsing only: no Docker engine needed; Debian's docker-compose,
# apt-get install --no-install-recommends docker-compose, or the `docker compose` plugin), the
# Prometheus configuration and alert rules with promtool (Debian's prometheus package), runs
# the alert rules' unit tests (deploy/prometheus/alerts.test.yml) and parses the Grafana
# dashboard. That the dashboard's and the alerts' metrics exist is tests/it/ops/deploy_metrics.rs.
# The file requires HERALD_CLUSTER_SECRET; a placeholder stands in for the check.
compose-check:
	@if command -v docker-compose >/dev/null 2>&1; then \
		HERALD_CLUSTER_SECRET=compose-check docker-compose -f docker-compose.yml config -q; \
	elif docker compose version >/dev/null 2>&1; then \
		HERALD_CLUSTER_SECRET=compose-check docker compose -f docker-compose.yml config -q; \
	else \
		echo "compose-check: docker-compose is missing; run as root: apt-get install -y --no-install-recommends docker-compose"; \
		exit 1; \
	fi
	@echo "compose-check: docker-compose.yml is valid"
	@command -v promtool >/dev/null 2>&1 || { \
		echo "compose-check: promtool is missing; run as root: apt-get install -y --no-install-recommends prometheus"; \
		exit 1; }
	promtool check config deploy/prometheus/prometheus.yml
	promtool test rules deploy/prometheus/alerts.test.yml
	python3 -c 'import json, sys; json.load(open("deploy/grafana/dashboards/herald.json"))'
	@echo "compose-check: Prometheus config, alert rules (and their unit tests) and the Grafana dashboard are valid"

bench-build: deps
	$(CARGO) build --release --bin herald
	@echo "load generator: $(CARGO_TARGET_DIR)/release/herald bench --help (see benches/README.md)"

# Every figure of the produce-path table with the machine's ceilings, in one run (benches/bench.sh;
# about 10-15 min). QUICK=1 make bench: a 2-minute smoke run.
bench: bench-build
	HERALD=$(CARGO_TARGET_DIR)/release/herald QUICK=$(QUICK) benches/bench.sh

clean:
	$(CARGO) clean
