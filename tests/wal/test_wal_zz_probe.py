import sys
print("PATH", sys.path[:4], __name__)
