"""spottrain.profiler"""
