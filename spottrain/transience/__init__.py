"""spottrain.transience"""
