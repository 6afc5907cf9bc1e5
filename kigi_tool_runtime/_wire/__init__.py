"""The sans-IO wire pieces shared by every transport: line splitting."""
