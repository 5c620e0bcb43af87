"""What one tensor object costs in resident memory: a view of a matrix row, and a 256-float tensor of its own."""
import torch


def rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


m = torch.zeros(1000, 256)
before = rss_mb()
views = [m[i % 1000] for i in range(500_000)]
print("a row view:", round((rss_mb() - before) * 2**20 / 500_000), "bytes")
before = rss_mb()
own = [torch.zeros(256) for _ in range(200_000)]
print("a 256-float tensor of its own:", round((rss_mb() - before) * 2**20 / 200_000), "bytes")
