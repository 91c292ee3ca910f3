"""The job controller, one module per phase of a pass over the jobs (controller.py composes
them): what the pass reads, a job's next state after its attempt ended, running jobs,
budget holds, placement, and the batched write of what the pass decided."""
