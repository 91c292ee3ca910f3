"""Every cache lifetime, timeout and time window of the AWS adapter, each with its reason.

One file so an operator (or a reviewer) can see at once how stale anything can be and how
long any call may block; the settings that expose some of them take their defaults here.
"""

from __future__ import annotations

from datetime import timedelta

# Spot prices and the assembled offering list. Spot prices move at most every few minutes
# and DescribeSpotPriceHistory is one of the slower, more throttled EC2 calls (moto: 1.5 s).
PRICE_REFRESH = timedelta(minutes=5)

# Instance types, the zones offering them and on-demand list prices: AWS changes these a
# few times a year; a day keeps new types and price cuts reasonably fresh at ~zero API cost.
CATALOG_REFRESH = timedelta(days=1)

# Configured subnets and security groups per region: an operator edits them rarely, and a
# launch into a deleted subnet fails clearly (LaunchRejected/FatalError) rather than silently.
NETWORK_REFRESH = CATALOG_REFRESH

# The EC2 API is eventually consistent (AWS: "Eventual consistency in the Amazon EC2 API"):
# a just-launched id can be missing from DescribeInstances for a while. The scheduler waits
# this long after the attempt's launch time before believing a NOT_FOUND; minutes, not
# seconds, because a slow region under load is exactly when a double launch costs most.
VISIBILITY_DELAY = timedelta(minutes=5)

# A Spot Instance interruption notice comes "two minutes before Amazon EC2 stops or
# terminates your Spot Instance" (EC2 User Guide, "Spot Instance interruption notices").
NOTICE_WINDOW = timedelta(minutes=2)

# How long EC2 remembers a RunInstances ClientToken. "A client token is valid for at least
# 24 hours after the termination of the instance" - Amazon EC2 API Reference, "Ensuring
# idempotency" (docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html).
# Counted from termination, so 24 h from launch is a safe lower bound.
IDEMPOTENCY_WINDOW = timedelta(hours=24)

# Spot interruption warnings read from SQS are kept this long: an instance is gone two
# minutes after its warning, so six hours only covers a daemon that polls very late.
NOTICE_KEEP = timedelta(hours=6)

# Spot placement scores (GetSpotPlacementScores). AWS limits the distinct configurations an
# account may ask about per 24 hours ("Spot placement score ... limits" in the EC2 User
# Guide) and the scores move slowly: each region is asked at most hourly, and at most this
# many regions per price poll, so many regions are scored over a few polls, not in a burst.
RISK_REFRESH = timedelta(hours=1)
RISK_CALLS_PER_POLL = 4

# Per HTTP connection / read. RunInstances for a gang and paged catalog calls can take tens
# of seconds; a dead endpoint should fail within one scheduler tick.
CONNECT_TIMEOUT = timedelta(seconds=10)
READ_TIMEOUT = timedelta(seconds=60)

# On the instance (the boot script): IMDS answers locally within milliseconds, so 2 s per
# call means "no IMDS" (tests, containers without hop limit) rather than a slow one ...
IMDS_TIMEOUT = timedelta(seconds=2)
# ... and the exit record is retried for about half a minute before the box powers off
# anyway: S3 hiccups pass in seconds, and a box kept up to retry longer is billed.
RECORD_ATTEMPTS = 5
RECORD_RETRY_DELAY = timedelta(seconds=5)

# On a GPU instance the job starts only once nvidia-smi answers: the Deep Learning Base AMI's
# driver loads within a minute of boot; past this the GPU is taken as absent and the attempt
# ends with "no GPU" (exit 77) rather than training on the CPU. Billed while it waits, so
# bounded.
GPU_WAIT = timedelta(seconds=600)
