# lockyard: make help lists the targets.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 8m

.PHONY: help test demo bench chaos lint fuzz modcheck redis-server

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

test: redis-server ## gofmt, vet, and every test with -race (miniredis, a real redis-server, a 6-node Cluster, Sentinel)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd chaos && $(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd goredis && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd rueidis && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd gocron && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd otel && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd examples/prometheus && $(GO) vet ./... && $(GO) test -race -count=1 ./...

demo: ## the oversell story on an embedded Redis (or REDIS_ADDR)
	$(GO) run ./examples/oversell

FAIRFLAGS ?= -reps 1
SEMFLAGS ?= -reps 5 -dur 2s -peer sem/peer

bench: redis-server ## micro-benchmarks, lockyard vs redsync and bsm/redislock (bench/, about 6 min), the fairness scenarios (bench/fair, about 2.5 min; FAIRFLAGS='-base REV' runs them against REV too, interleaved), then the semaphore against npm redis-semaphore (bench/sem, about 2 min; needs node and npm)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./internal/reentrant/ ./registry/
	cd goredis && $(GO) test -run '^$$' -bench . -count 1 .
	cd rueidis && $(GO) test -run '^$$' -bench . -count 1 .
	cd bench && $(GO) run . $(BENCHFLAGS)
	cd bench && $(GO) run ./fair $(FAIRFLAGS)
	cd bench/sem/peer && npm ci --no-audit --no-fund --loglevel=error
	cd bench && $(GO) run ./sem $(SEMFLAGS)

CHAOS_REPORT ?= $(CURDIR)/chaos/figures.txt

chaos: redis-server ## the fault suite: 18 scenarios on real redis-servers and toxiproxy, -race (chaos/, about 3 min); figures in chaos/figures.txt
	rm -f $(CHAOS_REPORT)
	cd chaos && CHAOS_REPORT=$(CHAOS_REPORT) $(GO) test -race -count=1 -timeout 14m -v .
	cd chaos && $(GO) test -run '^$$' -fuzz FuzzDistinctKeys -fuzztime 15s .
	@echo; echo "figures ($(CHAOS_REPORT)):"; cut -f2- $(CHAOS_REPORT)

modcheck: ## build every nested module outside the workspace against the root module served as a release (docs/RELEASING.md)
	.ci/modproxy

lint: ## go vet and staticcheck
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fuzz: ## fuzz the key handling for 60s
	$(GO) test -run '^$$' -fuzz FuzzKeys -fuzztime 60s ./registry/

redis-server: ## install Debian's redis-server and redis-sentinel if missing (the real-Redis test tiers need them)
	@command -v redis-server >/dev/null 2>&1 && command -v redis-sentinel >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server and redis-sentinel (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null; \
	  else \
	    echo "redis-server or redis-sentinel is missing: run 'sudo apt-get install -y redis-server redis-sentinel' (or your OS's packages), then make test"; exit 1; \
	  fi; }
	@redis-server --version
