//! The Windows side of a push: PowerShell 5.1 that reports what the host
//! holds, and that appends the streamed pieces to `<sha256>.part` and
//! renames it `<sha256>` once its SHA-256 is right. Each script starts with
//! its `# kwinctl-sim:` header (winsim carries it out by its own model).

use super::Local;
use crate::render::ps_quote;
use crate::transport::StreamMode;

/// Where pushed files are kept on a Windows host, each named by its SHA-256.
pub const DIR: &str = r"C:\ProgramData\kwinctl\push";

/// The longest script that travels in the command line: its UTF-16LE base64
/// (8/3 of it) and the rest of `powershell.exe … -EncodedCommand` stay
/// within cmd.exe's 8191 characters, through which WinRS and Windows's
/// OpenSSH both run commands.
pub const MAX_RECEIVE_SCRIPT: usize = 2900;

fn header(v: serde_json::Value) -> String {
    format!("# kwinctl-sim: {v}\n")
}

/// Asks, per file, `KWP <sha256> done | none | part LEN SHA256`. A part is
/// read with sharing allowed: a writer an interrupted run left behind may
/// still hold it open. Over WinRM it also asks the host's
/// `MaxEnvelopeSizekb` (`KWP-ENVELOPE KB`, 0 when it cannot be read), which
/// sizes the Send requests (docs/research/push.md#winrm-limits).
pub fn ask(files: &[&Local], mode: StreamMode) -> String {
    let list: Vec<_> = files
        .iter()
        .map(|f| serde_json::json!({"sha256": f.sha256, "size": f.size}))
        .collect();
    let envelope = mode == StreamMode::Sends;
    let mut s =
        header(serde_json::json!({"kind": "push_status", "files": list, "envelope": envelope}));
    s.push_str(&format!(
        r#"$dir = {dir}
function Get-KwPushed {{
    param([string]$Sha, [long]$Size)
    $done = Join-Path $dir $Sha
    $part = $done + '.part'
    if ((Test-Path -LiteralPath $done -PathType Leaf) -and (Get-Item -LiteralPath $done).Length -eq $Size) {{
        'KWP {{0}} done' -f $Sha
    }} elseif (Test-Path -LiteralPath $part -PathType Leaf) {{
        $fs = [IO.File]::Open($part, 'Open', 'Read', 'ReadWrite')
        try {{
            $len = $fs.Length
            $hash = [BitConverter]::ToString([Security.Cryptography.SHA256]::Create().ComputeHash($fs)).Replace('-', '').ToLowerInvariant()
        }} finally {{
            $fs.Dispose()
        }}
        'KWP {{0}} part {{1}} {{2}}' -f $Sha, $len, $hash
    }} else {{
        'KWP {{0}} none' -f $Sha
    }}
}}
"#,
        dir = ps_quote(DIR)
    ));
    for f in files {
        s.push_str(&format!(
            "Get-KwPushed {} {}\n",
            ps_quote(&f.sha256),
            f.size
        ));
    }
    if envelope {
        // the WSMan: drive's view of the service's own configuration
        s.push_str(
            "$kb = 0\ntry { $kb = [int](Get-Item -LiteralPath 'WSMan:\\localhost\\MaxEnvelopeSizekb' -ErrorAction Stop).Value } catch { $kb = 0 }\n'KWP-ENVELOPE {0}' -f $kb\n",
        );
    }
    s
}

/// Receives one file from `offset` on: the file's own bytes on stdin, over
/// WinRM and over SSH alike, read from `[Console]::OpenStandardInput()`.
/// Runs with no bootstrap: stdin is the file's. The script must not name
/// `$input`: PowerShell's console host reads stdin as the command's
/// pipeline input, as text lines, exactly when the command uses `$input`
/// (docs/research/push.md, "Raw bytes on a PowerShell's stdin").
pub fn receive(f: &Local, offset: u64) -> String {
    let head = header(serde_json::json!({
        "kind": "push_receive", "sha256": f.sha256, "size": f.size, "offset": offset,
    }));
    format!(
        r#"{head}$ErrorActionPreference = 'Stop'
$dir = {dir}
$done = Join-Path $dir {sha}
$part = $done + '.part'
New-Item -ItemType Directory -Force -Path $dir | Out-Null
$fs = [IO.File]::Open($part, 'OpenOrCreate', 'Write', 'ReadWrite')
if ($fs.Length -lt {offset}) {{ $fs.Dispose(); throw ('{{0}} holds {{1}} bytes, fewer than the {offset} to resume from: run again' -f $part, (Get-Item -LiteralPath $part).Length) }}
$fs.SetLength({offset})
[void]$fs.Seek(0, 'End')
$in = [Console]::OpenStandardInput()
$buf = New-Object byte[] 262144
while (($n = $in.Read($buf, 0, $buf.Length)) -gt 0) {{ $fs.Write($buf, 0, $n) }}
$fs.Dispose()
$len = (Get-Item -LiteralPath $part).Length
if ($len -ne {size}) {{ 'KWP {hex} short {{0}}' -f $len; exit 3 }}
$hash = (Get-FileHash -Algorithm SHA256 -LiteralPath $part).Hash.ToLowerInvariant()
if ($hash -ne '{hex}') {{ Remove-Item -Force -LiteralPath $part; 'KWP {hex} bad {{0}}' -f $hash; exit 4 }}
Move-Item -Force -LiteralPath $part -Destination $done
'KWP {hex} ok'
"#,
        dir = ps_quote(DIR),
        sha = ps_quote(&f.sha256),
        size = f.size,
        hex = f.sha256,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Local {
        Local {
            path: "kubelet.exe".into(),
            size: 123_456_789,
            sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn the_receiving_script_fits_a_command_line() {
        let s = receive(&local(), 99_999_999);
        assert!(s.len() <= MAX_RECEIVE_SCRIPT, "{} bytes", s.len());
        let line = crate::transport::powershell_command_line(&s);
        assert!(line.len() < 8191, "{} characters", line.len());
        assert!(s.contains("$fs.SetLength(99999999)"), "{s}");
        assert!(s.contains(&format!("'KWP {} ok'", "ab".repeat(32))), "{s}");
    }

    #[test]
    fn the_receiving_script_leaves_stdin_to_itself() {
        // PowerShell's console host reads stdin as pipeline input, as text,
        // when the command names $input (any case, or as ${input})
        let s = receive(&local(), 0).to_ascii_lowercase();
        assert!(s.contains("[console]::openstandardinput()"), "{s}");
        let named = |v: &str| {
            s.match_indices(v).any(|(i, _)| {
                !s[i + v.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        assert!(!named("$input") && !s.contains("${input}"), "{s}");
    }

    #[test]
    fn asking_names_every_file_once() {
        let f = local();
        for mode in [StreamMode::Raw, StreamMode::Sends] {
            let s = ask(&[&f], mode);
            assert!(s.starts_with("# kwinctl-sim: {"), "{s}");
            assert_eq!(
                s.matches(&format!("Get-KwPushed '{}' 123456789", f.sha256))
                    .count(),
                1
            );
            // the envelope only where Send requests carry the file
            let asks = s.contains(r"'WSMan:\localhost\MaxEnvelopeSizekb'");
            assert_eq!(asks, mode == StreamMode::Sends, "{s}");
            assert_eq!(s.contains(r#""envelope":true"#), asks, "{s}");
        }
    }
}
