# Allocation-heavy Python workload for test_programs.c: run with and without
# LD_PRELOAD=libarena.so (PYTHONMALLOC=malloc, PYTHONHASHSEED=0); the output
# (counts and checksums) must be the same.
import hashlib
import json
import random
import threading


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


rnd = random.Random(12345)
N = 400_000

# A dict of a million entries: many small strings and tuples.
d = {}
for i in range(N):
    d["k%07d-%x" % (i, rnd.getrandbits(24))] = (i, "v" * (i % 23))
print("dict", len(d))

keys = sorted(d, key=lambda k: (len(d[k][1]), k))
print("sorted", digest(keys[:1000]), digest(keys[-1000:]))

# Free half of it, then grow it again with lists of varied sizes.
for k in keys[::2]:
    del d[k]
del keys
for i in range(N // 2):
    d[i] = [i] * (i % 7)
print("rebuilt", len(d), sum(len(v) for v in d.values() if isinstance(v, list)))

# JSON round trip of a large part.
sub = {str(k): d[k] for k in list(d)[:50000]}
text = json.dumps(sub)
back = json.loads(text)
print("json", len(text), len(back), hashlib.sha256(text.encode()).hexdigest()[:16],
      back == json.loads(text))
del sub, back, text

# A growing bytearray (realloc after realloc) and a huge string.
acc = bytearray()
for i in range(300000):
    acc += b"%d," % i
print("bytes", len(acc), hashlib.sha256(acc).hexdigest()[:16])
big = "".join(str(i) for i in range(1_000_000))
print("big", len(big), hashlib.md5(big.encode()).hexdigest())
del acc, big

# Sorting a list of tuples of floats.
lst = [(rnd.random(), i) for i in range(300000)]
lst.sort()
print("list", digest(lst[:100]), digest(lst[-100:]))
del lst

# Threads allocating and freeing at the same time (objects made by one thread
# are freed by another when the dicts are dropped by the main thread).
results = [None] * 4


def work(t):
    r = random.Random(t)
    local = {}
    for i in range(100000):
        local[r.getrandbits(16)] = "x" * r.randint(0, 100)
        if i % 3 == 0:
            local.pop(r.getrandbits(16), None)
    results[t] = (len(local), sum(len(v) for v in local.values()))


threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", results)
del d
print("done")
