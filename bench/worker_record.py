"""The prologue of the Python workers the benchmarks start: where results go
(argv[1]), the attempt and rank, and record(name, value), which writes one
value atomically (a rename) for the benchmark to read."""

PROLOGUE = r'''
import os, sys, time
out = sys.argv[1]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
def record(name, value):
    path = os.path.join(out, name)
    with open(path + f".{os.getpid()}", "w") as f:
        f.write(repr(value))
    os.rename(path + f".{os.getpid()}", path)
'''
