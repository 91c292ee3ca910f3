"""Every cache lifetime, timeout and time window of the GCP adapter, each with its reason."""

from __future__ import annotations

from datetime import timedelta

# The composed offerings (Spot and on-demand SKU prices). GCE Spot prices change at most once
# a day (Google: "Spot prices ... can change up to once every 30 days" / daily adjustments),
# but the daemon polls every price_interval (5 min by default): matching it keeps the
# adapter's view no staler than the daemon expects while costing one paged catalog read.
PRICE_REFRESH = timedelta(minutes=5)

# Machine types and accelerator types per zone: they change a few times a year.
CATALOG_REFRESH = timedelta(days=1)

# A just-inserted instance is normally visible (PROVISIONING) through instances.get as soon
# as its insert operation exists, and describe() reads the operation while it is not; this
# covers an operation list that lags behind the insert call itself.
VISIBILITY_DELAY = timedelta(minutes=2)

# GCE keeps a requestId for "at least 60 minutes" (compute API reference, requestId). The
# deterministic instance name covers the rest: a second insert of a live name is 409.
REQUEST_ID_WINDOW = timedelta(minutes=60)

# Spot VMs: the metadata server's `instance/preempted` turns TRUE this long before GCE sends
# the ACPI soft-off (`scheduling.preemptionNoticeDuration`, "Specifies the Metadata Service
# preemption notice duration before the GCE ACPI G2 Soft Off signal is triggered for Spot VMs
# only": compute_v1 Scheduling). Without it the notice and the shutdown start together and a
# job has the ~30 s shutdown window only; with 120 s it has about 150 s to save.
PREEMPTION_NOTICE = timedelta(seconds=120)
# The shutdown window GCE gives after the soft-off (Compute Engine: "Preemption process").
SHUTDOWN_WINDOW = timedelta(seconds=30)

# Capacity advice (advice.capacity): each (zone, shape) is asked at most once per
# RISK_REFRESH, and at most RISK_CALLS_PER_POLL new ones per price poll, so a large catalog
# is scored over a few polls and the API's per-project quota is never spent in one burst;
# "best-effort ... based on historical data and current conditions" (the API reference) moves
# slowly enough for that.
RISK_REFRESH = timedelta(hours=6)
RISK_CALLS_PER_POLL = 10

# Capacity history (advice.capacityHistory): GCE cuts it in days ("the daily preemption
# rates ... over the past 30 days", boundaries at midnight Pacific Time; only the current
# day's figure still moves), so each (zone, machine type) is asked at most once per
# HISTORY_REFRESH, at most HISTORY_CALLS_PER_POLL new ones per price poll, on the same
# per-project quota as the advice. A refused call (403 without compute.advice.capacityHistory,
# 429 out of quota) stops every ask of the project, and a 404 (the API not in that region)
# every ask of the region, until HISTORY_REFRESH has passed.
HISTORY_REFRESH = timedelta(hours=12)
HISTORY_CALLS_PER_POLL = 10

# Per HTTP request (google-api-core passes it to requests).
REQUEST_TIMEOUT = timedelta(seconds=60)

# The Billing Catalog returns at most 5,000 SKUs per page; asking for fewer only adds pages.
SKU_PAGE_SIZE = 5000
# Aggregated lists: GCE's maximum maxResults.
LIST_PAGE_SIZE = 500

# On the instance (the startup script): the exit record is retried for about half a minute
# before the VM powers off anyway (a VM kept up to retry longer is billed).
RECORD_ATTEMPTS = 5
RECORD_RETRY_DELAY = timedelta(seconds=5)

# On a GPU instance the job starts only once nvidia-smi answers: the Deep Learning VM installs
# the driver on first boot (install-nvidia-driver=True), which takes several minutes; past
# this the GPU is taken as absent and the attempt ends with "no GPU" (exit 77) rather than
# training on the CPU. Billed while it waits, so bounded.
GPU_WAIT = timedelta(seconds=900)
