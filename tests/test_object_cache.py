"""The object cache's ownership rules."""

from engine.caches.objects import ObjectCache


def test_take_put_and_lease_release_once():
    disposed = []
    cache = ObjectCache(max_entries=2, on_evict=disposed.append)
    assert cache.take("a") is None  # a miss permits recompute
    cache.put("a", "A")
    lease = cache.take("a")
    assert lease.value == "A"
    lease.release()
    lease.release()  # idempotent
    assert cache.hits == 1 and cache.misses == 1 and disposed == []


def test_lru_eviction_skips_borrowed_entries_and_disposes_after_release():
    disposed = []
    cache = ObjectCache(max_entries=1, on_evict=disposed.append)
    cache.put("a", "A")
    lease = cache.take("a")
    cache.put("b", "B")  # over bounds, but "a" is borrowed: "b" stays newest, "a" kept
    assert len(cache) == 2 and disposed == []
    lease.release()  # now "a" can go
    assert disposed == ["A"] and len(cache) == 1
    assert cache.take("a") is None and cache.take("b").value == "B"


def test_replacing_a_borrowed_entry_disposes_it_after_its_last_lease():
    disposed = []
    cache = ObjectCache(max_entries=4, on_evict=disposed.append)
    cache.put("k", "old")
    with cache.take("k") as value:
        cache.put("k", "new")
        assert value == "old" and disposed == []
    assert disposed == ["old"]
    assert cache.take("k").value == "new"


def test_put_transfers_ownership_even_when_evicted_at_once():
    disposed = []
    cache = ObjectCache(max_entries=0, on_evict=disposed.append)
    cache.put("x", "X")
    assert disposed == ["X"] and len(cache) == 0


def test_bounded_by_size():
    cache = ObjectCache(max_entries=100, max_size=10, size_of=len)
    for key in "abcd":
        cache.put(key, key * 4)
    assert cache.size <= 10 and cache.take("a") is None and cache.take("d") is not None


def test_keys_count_against_the_size_bound():
    cache = ObjectCache(max_entries=100, max_size=100, size_of=len, key_size=len)
    cache.put("k" * 40, "v")
    assert cache.size == 41
    cache.put("j" * 70, "w")  # both together would be 112 bytes: the older entry goes
    assert cache.size == 71 and len(cache) == 1 and cache.take("k" * 40) is None
