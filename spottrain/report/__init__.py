"""spottrain.report"""
