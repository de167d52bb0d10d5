"""spottrain.catalog"""
