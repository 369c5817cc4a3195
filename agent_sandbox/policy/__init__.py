"""policy"""
