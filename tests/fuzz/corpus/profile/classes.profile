# custom classes, a drain, rates in every unit
class S 16x16 steps=4 alpha=1.5 priority=10
class XL 64x32 steps=50 alpha=8
class T 8x8 steps=1
phase ramp 0 10 2/s S=1 XL=0.25 T=0.5
phase steady 10 20.5 30/min S=0.2 XL=0.8
phase drain 20.5 30 0
