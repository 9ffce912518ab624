package main

import (
	"context"
	"sync/atomic"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/google/uuid"
)

// springClient emulates one lock of Spring Integration's RedisLockRegistry
// (7.x) on the wire: its scripts, its value (the registry's client id), its
// waiting. A SPIN_LOCK waiter runs the obtain script every idle; a
// PUB_SUB_LOCK waiter runs it, then waits for a message naming the lock key
// on the pattern registryKey-channel:* (or expireAfter), and runs it again.
// Its unlock deletes the key; only PUB_SUB_LOCK's publishes. It writes
// nothing else: no wait marker, no queue entry.
type springClient struct {
	pool     *redigo.Pool
	key      string // the lock key, registryKey:path
	channel  string // registryKey-channel:lockKey
	pattern  string // registryKey-channel:*
	clientID string
	pubsub   bool
	idle     time.Duration
	ttl      time.Duration

	armed atomic.Bool   // a waiter registered for the next message (Spring's notifyMap entry)
	note  chan struct{} // the message, for an armed waiter
}

var (
	springObtain = redigo.NewScript(1, `local lockClientId = redis.call('GET', KEYS[1])
if lockClientId == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return true
elseif not lockClientId then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return true
end
return false`)
	springUnlockPubSub = redigo.NewScript(1, `local lockClientId = redis.call('GET', KEYS[1])
if (lockClientId == ARGV[1] and redis.call('UNLINK', KEYS[1]) == 1) then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return true
end
return false`)
	springUnlockSpin = redigo.NewScript(1, `local lockClientId = redis.call('GET', KEYS[1])
if lockClientId == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
  return true
end
return false`)
)

func newSpringClient(pool *redigo.Pool, registryKey, path string, pubsub bool) *springClient {
	key := registryKey + ":" + path
	return &springClient{pool: pool, key: key, channel: registryKey + "-channel:" + key,
		pattern: registryKey + "-channel:*", clientID: uuid.NewString(), pubsub: pubsub,
		idle: 100 * time.Millisecond, ttl: 60 * time.Second, note: make(chan struct{}, 1)}
}

// listen runs the registry's message listener until ctx ends: a message
// naming the key completes the armed waiter's future.
func (s *springClient) listen(ctx context.Context) error {
	c, err := s.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	psc := redigo.PubSubConn{Conn: c}
	if err := psc.PSubscribe(s.pattern); err != nil {
		c.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		_ = psc.PUnsubscribe()
		c.Close()
	}()
	go func() {
		for {
			switch m := psc.Receive().(type) {
			case redigo.Message:
				if string(m.Data) == s.key && s.armed.Load() {
					select {
					case s.note <- struct{}{}:
					default:
					}
				}
			case error:
				return
			}
		}
	}()
	return nil
}

func (s *springClient) obtain() (bool, error) {
	c := s.pool.Get()
	defer c.Close()
	ok, err := redigo.Bool(springObtain.Do(c, s.key, s.clientID, s.ttl.Milliseconds()))
	if err == redigo.ErrNil {
		return false, nil // Lua false is a nil reply
	}
	return ok, err
}

// lock waits for the lock as Spring's lock() does, until ctx ends.
func (s *springClient) lock(ctx context.Context) error {
	for ctx.Err() == nil {
		ok, err := s.obtain()
		if err != nil || ok {
			return err
		}
		if !s.pubsub {
			if !sleepCtx(ctx, s.idle) {
				break
			}
			continue
		}
		// subscribeLock: register, check again, wait for the message.
		s.armed.Store(true)
		if ok, err := s.obtain(); err != nil || ok {
			s.armed.Store(false)
			return err
		}
		t := time.NewTimer(s.ttl)
		select {
		case <-s.note:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		s.armed.Store(false)
	}
	return ctx.Err()
}

func (s *springClient) unlock() error {
	c := s.pool.Get()
	defer c.Close()
	var err error
	if s.pubsub {
		_, err = springUnlockPubSub.Do(c, s.key, s.clientID, s.channel)
	} else {
		_, err = springUnlockSpin.Do(c, s.key, s.clientID)
	}
	return err
}

// sleepCtx sleeps d, or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
