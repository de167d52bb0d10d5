"""spottrain.perf"""
