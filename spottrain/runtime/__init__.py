"""spottrain.runtime"""
