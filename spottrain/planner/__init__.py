"""spottrain.planner"""
