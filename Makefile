# lockyard: make help lists the targets.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 8m

.PHONY: help test test-servers demo bench chaos lint fuzz modcheck redis-server servers

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
	$(MAKE) --no-print-directory test-servers

# The newer servers that .ci/servers installs (Debian's packages, unpacked
# into a cache directory), and the real-server tests that run again on each:
# the lock's lifecycle, the watchdog, hand-offs, leases, Spring interop, the
# native commands and the ACL (registry); each adapter's client tests and
# Cluster wake-ups on Redis 8.6 and Valkey 9.1. Redis 7.0 (Debian's
# redis-server) runs every test above.
SERVERS_DIR   ?= $(or $(LOCKYARD_SERVERS),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lockyard/servers)
NEWER_SERVERS ?= redis-8.6 valkey-9.1 valkey-8.1
SERVER_TESTS  ?= ^Test(Native|SilentReleaseMovesUp|ReleaseWakesFew|PollerAmongListeners|QueuedByPassIsWoken|LeastPrivilegeACL|ACLWithout|Close|ExecuteLocked|RenewLock|Phases|PubSub|ForeignReleaseWakesWaiter|AutoRenew|RenewalDetectsLoss|LostAtDeadline|LockUnlockManyTimes|WireFormat|ReentrantCostsNoCommands|TwoKeys|WaiterInOtherRegistry|ExpiryLetsOtherIn|WrongTypeKey|LocalHandOffChain|HandOff|Lease|ReleaseSeesWaiters|TurnsAlternate|ClientsWithoutQueueGetTurns|EvictedInstanceTakesTurns|FreeKeyNotKeptForTheUntold|Stats|LockFor|TryLockContext|ScriptFlushRecovery)
ADAPTER_TESTS ?= ^Test(Client|SingleNode|RenewalAndScriptFlush|Contention|ClusterWakeups|ClusterMutualExclusion)

servers: ## install Redis 8.6, Valkey 9.1 and Valkey 8.1 from Debian's packages into a cache directory (.ci/servers; no system install)
	LOCKYARD_SERVERS=$(SERVERS_DIR) .ci/servers

test-servers: servers ## the real-server tests again on Redis 8.6, Valkey 9.1 and Valkey 8.1 (part of make test)
	@set -e; for s in $(NEWER_SERVERS); do \
	  echo "== registry on $$s"; \
	  LOCKYARD_REDIS_SERVER=$(SERVERS_DIR)/$$s/redis-server LOCKYARD_EXPECT_SERVER=$$s \
	    $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(SERVER_TESTS)' ./registry/; \
	done
	@set -e; for s in redis-8.6 valkey-9.1; do for m in goredis rueidis; do \
	  echo "== $$m on $$s"; \
	  (cd $$m && LOCKYARD_REDIS_SERVER=$(SERVERS_DIR)/$$s/redis-server LOCKYARD_EXPECT_SERVER=$$s \
	    $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(ADAPTER_TESTS)' .); \
	done; done

demo: ## the oversell story on an embedded Redis (or REDIS_ADDR)
	$(GO) run ./examples/oversell

FAIRFLAGS ?= -reps 1
SEMFLAGS ?= -reps 5 -dur 2s -peer sem/peer
RWFLAGS ?= -reps 3 -dur 2s

bench: redis-server servers ## micro-benchmarks, lockyard vs redsync and bsm/redislock (bench/, about 6 min on Redis 7.0, and where a 7.0 cycle's server time goes, bench/cycle, 1 min; then scenarios u and r on Redis 8.6 and Valkey 9.1 and scenario 4 on rueidis on 8.6, about 4 min), the fairness scenarios (bench/fair, about 2.5 min; FAIRFLAGS='-base REV' runs them against REV too, interleaved), then the semaphore against npm redis-semaphore (bench/sem with its fair floor, about 6 min; needs node and npm; SEMFLAGS='-base REV' runs lockyard at REV too), then the read-write lock on Redis 7.0 and 8.6 (bench/rw, about 2 min; RWFLAGS='-base REV') and its mix's ceiling by order of serving (bench/rw -model, 1 s, no Redis), then several keys at once against bsm/redislock ObtainMulti (bench/multi, about 4 min; MULTIFLAGS) and its random scenario's ceiling by way of waiting (bench/multi -model, 3 s, no Redis), and that scenario on a 6-node Cluster (bench/multi -cluster, 30 s)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./internal/reentrant/ ./registry/
	cd goredis && $(GO) test -run '^$$' -bench . -count 1 .
	cd rueidis && $(GO) test -run '^$$' -bench . -count 1 .
	cd bench && $(GO) run . $(BENCHFLAGS)
	cd bench && $(GO) run ./cycle
	@set -e; for s in redis-8.6 valkey-9.1; do echo; echo "== scenarios u and r on $$s (native commands)"; \
	  (cd bench && LOCKYARD_REDIS_SERVER=$(SERVERS_DIR)/$$s/redis-server $(GO) run . -scenarios u,r $(BENCHFLAGS)); done
	@echo; echo "== scenario 4 on redis-8.6, rueidis"
	cd bench && LOCKYARD_REDIS_SERVER=$(SERVERS_DIR)/redis-8.6/redis-server $(GO) run . -scenarios 4 -impls rueidis $(BENCHFLAGS)
	cd bench && $(GO) run ./fair $(FAIRFLAGS)
	cd bench/sem/peer && npm ci --no-audit --no-fund --loglevel=error
	cd bench && $(GO) run ./sem $(SEMFLAGS)
	cd bench && $(GO) run ./rw $(RWFLAGS)
	cd bench && LOCKYARD_REDIS_SERVER=$(SERVERS_DIR)/redis-8.6/redis-server $(GO) run ./rw $(RWFLAGS)
	cd bench && $(GO) run ./rw -model
	cd bench && $(GO) run ./multi $(MULTIFLAGS)
	cd bench && $(GO) run ./multi -model
	cd bench && $(GO) run ./multi -cluster -reps 1 -dur 30s

CHAOS_REPORT ?= $(CURDIR)/chaos/figures.txt

chaos: redis-server ## the fault suite: 20 scenarios on real redis-servers and toxiproxy, -race (chaos/, about 3 min); figures in chaos/figures.txt
	rm -f $(CHAOS_REPORT)
	cd chaos && CHAOS_REPORT=$(CHAOS_REPORT) $(GO) test -race -count=1 -timeout 14m -v .
	cd chaos && $(GO) test -run '^$$' -fuzz FuzzDistinctKeys -fuzztime 15s .
	@echo; echo "figures ($(CHAOS_REPORT)):"; cut -f2- $(CHAOS_REPORT)

modcheck: ## build every nested module outside the workspace against the root module served as a release (docs/RELEASING.md), and run the README's checkout box
	.ci/modproxy
	.ci/checkoutbox

lint: ## go vet and staticcheck
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fuzz: ## fuzz the key handling for 60s, a read-write lock's for 30s and AcquireAll's for 30s
	$(GO) test -run '^$$' -fuzz FuzzKeys -fuzztime 60s ./registry/
	$(GO) test -run '^$$' -fuzz 'FuzzRWLockKeys$$' -fuzztime 30s ./registry/
	$(GO) test -run '^$$' -fuzz 'FuzzAcquireAllKeys$$' -fuzztime 30s ./registry/

redis-server: ## install Debian's redis-server and redis-sentinel if missing (the real-Redis test tiers need them)
	@command -v redis-server >/dev/null 2>&1 && command -v redis-sentinel >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server and redis-sentinel (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null; \
	  else \
	    echo "redis-server or redis-sentinel is missing: run 'sudo apt-get install -y redis-server redis-sentinel' (or your OS's packages), then make test"; exit 1; \
	  fi; }
	@redis-server --version
