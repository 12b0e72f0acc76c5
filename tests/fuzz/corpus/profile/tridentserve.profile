# GF-DiT's "tridentserve" profile: 60 minutes of a dynamic mix, from light load through an
# overload to a background-heavy phase and a cooldown (about 60-180% of nominal capacity).
# Rescale with --target-load / --rate-scale and --profile-duration (see short.profile).
phase warmup       0  600  0.8/min  S=0.50 M=0.35 L=0.15
phase midload    600 1500  1.4/min  S=0.35 M=0.40 L=0.25
phase overload  1500 2400  2.4/min  S=0.50 M=0.30 L=0.20
phase bg_heavy  2400 3000  1.2/min  S=0.20 M=0.35 L=0.45
phase cooldown  3000 3600  0.6/min  S=0.55 M=0.35 L=0.10
