"""spottrain.sim"""
