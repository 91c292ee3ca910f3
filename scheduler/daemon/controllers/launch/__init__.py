"""The launch controller, one module per phase (controller.py runs them in order): the
request, the checkpoint store's fence, recording the cloud's answer, and adopting launches
whose answer was never recorded."""
