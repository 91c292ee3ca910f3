"""Every cache lifetime, timeout and time window of the Azure adapter, each with its reason."""

from __future__ import annotations

from datetime import timedelta

# Retail spot prices and the assembled offering list: Azure moves spot prices at most a few
# times a day, and the Retail Prices API is public but rate limited (HTTP 429).
PRICE_REFRESH = timedelta(minutes=5)

# Resource SKUs (sizes, zones, restrictions): they change when Microsoft adds hardware or
# the subscription's access changes; a day is fresh enough and costs one call per location.
CATALOG_REFRESH = timedelta(days=1)

# ARM is read-your-writes for a PUT it accepted (201): the VM is visible at once in state
# Creating. A short grace still covers a reply lost between ARM and us.
VISIBILITY_DELAY = timedelta(seconds=30)

# A Spot VM's eviction comes as a Scheduled Events `Preempt` whose NotBefore is "a minimum
# of 30 seconds" away (Azure Instance Metadata Service, Scheduled Events: event scheduling).
NOTICE_WINDOW = timedelta(seconds=30)

# Long-running operations we do wait on (a NIC or public IP, seconds in practice). The VM
# create and every delete are never waited on: their outcome is read by describe().
LRO_POLL = timedelta(seconds=2)

# Per HTTP connection / read: ARM answers a PUT within seconds; a dead endpoint should fail
# within one scheduler tick.
CONNECT_TIMEOUT = timedelta(seconds=10)
READ_TIMEOUT = timedelta(seconds=60)

# azure-core's retry policy (429 and 5xx): its exponential back-off base.
RETRY_BACKOFF = timedelta(seconds=0.8)

# Retail Prices HTTP 429: wait what Retry-After says (capped) and retry within the same
# refresh, at most this many times.
PRICES_RETRIES = 5
PRICES_MAX_WAIT = timedelta(seconds=60)

# Our own deletes are remembered this long, so a VM that vanishes after terminate() reads
# TERMINATED rather than evicted (the Delete eviction policy also makes a VM vanish).
TOMBSTONE_KEEP = timedelta(hours=6)

# On the VM (boot script): the exit record is retried for about half a minute.
RECORD_ATTEMPTS = 5
RECORD_RETRY_DELAY = timedelta(seconds=5)

# On a GPU instance the job starts only once nvidia-smi answers: the DSVM image's driver loads
# within a minute or two of boot; past this the GPU is taken as absent and the attempt ends
# with "no GPU" (exit 77) rather than training on the CPU. Billed while it waits, so bounded.
GPU_WAIT = timedelta(seconds=600)

# Spot placement scores (placementScores/spot/generate): each (location, size) is asked at
# most once per RISK_REFRESH, and at most RISK_CALLS_PER_POLL new ones per price poll; the
# API's throttling is per subscription ("Spot Placement Score ... limits" in the Azure docs)
# and the scores move slowly.
RISK_REFRESH = timedelta(hours=1)
RISK_CALLS_PER_POLL = 10

# Spot eviction-rate bands (Resource Graph's SpotResources): Microsoft computes them over "the
# last 28 trailing days", so they move slowly; ONE query asks for every (location, size) the
# offerings need, at most once per EVICTION_REFRESH and at most EVICTION_QUERIES_PER_POLL per
# price poll (a new set of locations and sizes is a new query). Resource Graph throttles
# each user to 15 queries per 5-second window ("Guidance for throttled requests in Azure
# Resource Graph": x-ms-user-quota-remaining, x-ms-user-quota-resets-after 00:00:05); one
# query per poll leaves that quota to the operator's own queries. A refused query leaves the
# pools on their placement scores until EVICTION_REFRESH has passed.
EVICTION_REFRESH = timedelta(hours=6)
EVICTION_QUERIES_PER_POLL = 1
# Rows per Resource Graph page (its maximum $top) and pages per query: GPU sizes times
# locations stay well under one page; the bound keeps a runaway answer from looping.
GRAPH_PAGE_ROWS = 1000
GRAPH_MAX_PAGES = 5
