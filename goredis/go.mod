module github.com/lockyard/lockyard/goredis

go 1.24

require (
	github.com/gomodule/redigo v1.9.3
	github.com/lockyard/lockyard v0.1.0
	github.com/redis/go-redis/v9 v9.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/petermattis/goid v0.0.0-20260820044319-269ab09b5261 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
