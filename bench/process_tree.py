"""The processes below a launcher, read from /proc: what a benchmark must
find to measure a job or to leave nothing of it running (torchrun 2.x
starts each worker in a session of its own, so a process group is not
enough)."""
import os


def descendants(root):
    """The pids of root's descendants, from /proc."""
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
        except OSError:
            continue
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
