# GF-DiT's "short" profile: a 10-minute sanity run of three loaded phases and a drain.
# Rates are GF-DiT's, calibrated for an 8-GPU video-DiT cluster: rescale them to this target
# with --target-load (from the calibrated T_single) or --rate-scale, and the clock with
# --profile-duration. Class mixes are weights over the classes S, M, L.
phase warmup    0  60  0.8/min  S=0.50 M=0.35 L=0.15
phase midload  60 360  1.5/min  S=0.55 M=0.35 L=0.10
phase press   360 540  2.5/min  S=0.70 M=0.25 L=0.05
phase drain   540 600  0
