# GF-DiT's "foreground_burst" profile: 30 minutes of a steady background of long (L) jobs hit by
# two bursts of short (S) foreground requests while L jobs are running.
# Rescale with --target-load / --rate-scale and --profile-duration (see short.profile).
phase warmup     0   180  0.5/min  S=0.00 M=0.40 L=0.60
phase burst1   180   360  3.0/min  S=0.85 M=0.10 L=0.05
phase recover  360   900  0.8/min  S=0.30 M=0.30 L=0.40
phase burst2   900  1080  3.0/min  S=0.85 M=0.10 L=0.05
phase drain   1080  1800  0.5/min  S=0.40 M=0.30 L=0.30
