import heapq
def sim(N, pairs, br, bc, G, sms=132, fixed=2.0):
    kts = N // bc; tiles = N // br
    length = lambda kt: tiles - (kt*bc)//br + fixed   # fixed per-CTA overhead in tile units
    order = []
    for g0 in range(0, pairs, G):
        gs = min(G, pairs - g0)
        for kt in range(kts):
            for p in range(g0, g0+gs):
                order.append(length(kt))
    heap = [0.0]*sms
    for L in order:
        t = heapq.heappop(heap); heapq.heappush(heap, t+L)
    total = sum(order)
    return max(heap), total/sms
for (N, pairs, br, bc) in [(16384,16,64,128),(4096,64,64,128),(1024,256,64,128),(16384,32,128,128),(4096,128,128,128)]:
    res = []
    for G in [1,2,4,8,pairs]:
        mk, ideal = sim(N, pairs, br, bc, G)
        res.append(f"G={G}: {mk/ideal:.3f}")
    print(N, pairs, br, bc, " ".join(res))
print("rule G = ceil(c*132/kts)")
import math
for (N, pairs, br, bc) in [(16384,16,64,128),(8192,32,64,128),(4096,64,64,128),(2048,128,64,128),(1024,256,64,128),(512,512,64,128),(16384,32,128,128),(4096,128,128,128),(1024,512,128,128),(4096,32,32,128)]:
    kts = N//bc
    res=[]
    for c in [0.5,1,2,4]:
        G = max(1, math.ceil(c*132/kts))
        mk, ideal = sim(N, pairs, br, bc, G)
        res.append(f"c={c}(G={G}): {mk/ideal:.3f}")
    mk, ideal = sim(N, pairs, br, bc, 1)
    print(N, pairs, br, bc, f"now {mk/ideal:.3f}", " ".join(res))
