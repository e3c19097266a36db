"""A worker that hangs where a rank waits for a peer that never comes (the
watchdog test of the hang report's Python stack)."""
import time
def wait_for_a_peer_that_never_comes():
    while True:
        time.sleep(3600)
print("ready", flush=True)
wait_for_a_peer_that_never_comes()
